package rules

import (
	"slices"

	"go.yaml.in/yaml/v3"
)

// maxExpanded bounds the nodes a file's aliases expand to: a few rules sharing their
// limits or their fields take some hundreds; a file of aliases of aliases (a "billion
// laughs") would have the parser walk billions.
const maxExpanded = 1 << 16

// expand reads n's aliases and merge keys as YAML does, in place: an alias (*name) as a
// copy of the node its anchor names, at the alias's line and column; a mapping's merge
// key (<<: *name, or a list of them) as the named mappings' fields that the mapping does
// not give itself, the first mapping of a list first. So a rule may share its limits with
// another (limits: *std) or take a whole rule's fields and change some (<<: *team). It
// reports false, with a problem, for a merge of something else than mappings and past
// maxExpanded nodes.
func (p *parser) expand(n *yaml.Node) bool {
	x := expander{p: p}
	x.node(n)
	return !x.bad
}

type expander struct {
	p     *parser
	nodes int
	bad   bool
}

// node returns n read: an alias's copy of its target, its contents read.
func (x *expander) node(n *yaml.Node) *yaml.Node { return x.nodeAt(n, nil) }

// nodeAt is node for n inside what the alias at brings (nil: outside any alias): n is
// copied, at the alias's line and column, every node below it too, so that a problem in
// it is reported where this rule takes it, not at the anchor (in another rule).
func (x *expander) nodeAt(n, at *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		if at == nil {
			at = n
		}
		n = n.Alias
	}
	if at != nil {
		c := *n
		c.Line, c.Column, c.Anchor = at.Line, at.Column, ""
		c.Content = slices.Clone(c.Content) // the anchor's own list stays as it is
		n = &c
	}
	// Only what aliases bring is counted: a file's own nodes are bounded by its size (a
	// match list of a hundred thousand teams is no "billion laughs").
	if at != nil {
		x.nodes++
	}
	if x.nodes > maxExpanded {
		if !x.bad {
			x.p.bad(n, "(top)", "aliases expand past %d nodes: write the rules out", maxExpanded)
		}
		x.bad = true
		return n
	}
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for i, c := range n.Content {
			if x.bad {
				break
			}
			n.Content[i] = x.nodeAt(c, at)
		}
	case yaml.MappingNode:
		x.mapping(n, at)
	}
	return n
}

// mapping reads n's fields, its merge keys replaced by the fields they bring; at as for
// nodeAt.
func (x *expander) mapping(n, at *yaml.Node) {
	var own, merged []*yaml.Node
	var mergedFrom []int // how many of merged each merged mapping brought, in order
	merges := 0          // merge keys read
	for i := 0; i+1 < len(n.Content) && !x.bad; i += 2 {
		k, v := n.Content[i], x.nodeAt(n.Content[i+1], at)
		switch {
		case k.Kind == yaml.AliasNode && k.Alias != nil:
			// A key that is an alias is the value its anchor names, as YAML reads it:
			// read by its own text, the anchor's name, it took *limits for a limits
			// field (a review).
			k = x.nodeAt(k, at)
		case at != nil:
			kc := *k
			kc.Line, kc.Column = at.Line, at.Column
			k = &kc
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!merge" {
			own = append(own, k, v)
			continue
		}
		if merges++; merges > 1 {
			// A key given twice, which YAML refuses (yaml.v3 decoding: "mapping key "<<"
			// already defined") and readers take either way: the first merge won here, the
			// last in PyYAML, without a word.
			x.p.bad(k, "<<", "given twice in one mapping: merge several as <<: [*a, *b], the first listed winning")
			continue
		}
		from := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			from = v.Content // read above
		}
		for _, m := range from {
			if m.Kind != yaml.MappingNode {
				x.p.bad(k, "<<", "want a mapping to merge, such as <<: *name where &name names a rule")
				x.bad = true
				return
			}
			merged = append(merged, m.Content...)
			mergedFrom = append(mergedFrom, len(m.Content))
		}
	}
	if merged == nil {
		n.Content = own
		return
	}
	// A field given in the mapping wins over a merged one, and an earlier merged one over
	// a later (YAML's merge key).
	given := map[string]bool{}
	for i := 0; i < len(own); i += 2 {
		given[own[i].Value] = true
	}
	// A key given twice in one merged mapping is said, as in a rule (pairs): kept first,
	// the second was dropped without a word (a review).
	start, seen := 0, map[string]bool{}
	for _, m := range mergedFrom {
		clear(seen)
		for i := start; i+1 < start+m && i+1 < len(merged); i += 2 {
			if k := merged[i]; k.Kind == yaml.ScalarNode && seen[k.Value] {
				x.p.bad(k, fieldName(k.Value), "given twice in the mapping <<: brings")
			} else {
				seen[k.Value] = true
			}
		}
		start += m
	}
	for i := 0; i+1 < len(merged); i += 2 {
		if k := merged[i]; !given[k.Value] {
			given[k.Value] = true
			own = append(own, k, merged[i+1])
		}
	}
	n.Content = own
}
