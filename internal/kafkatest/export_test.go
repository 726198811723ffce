package kafkatest

// TmpDir is node id's java.io.tmpdir, for the tests of package kafkatest_test.
func (c *Cluster) TmpDir(id int) string {
	for _, n := range c.nodes {
		if n.id == id {
			return n.tmpDir()
		}
	}
	return ""
}
