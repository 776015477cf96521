//go:build tools

// Package tools pins the code generators cryo runs (make generate), in a
// module of their own so that their dependencies stay out of cryo's.
package tools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
