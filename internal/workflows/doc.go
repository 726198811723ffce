// Package workflows keeps the GitHub Actions workflows (.github/workflows/*.yml) in step
// with the Makefile. It has no code, only a test, which guarantees that every `make
// TARGET` a workflow step runs names a target the Makefile defines, so a renamed or
// removed target fails `make test` here rather than a release on a tag.
package workflows
