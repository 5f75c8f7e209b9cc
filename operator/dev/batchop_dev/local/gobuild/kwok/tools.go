//go:build tools

// Package tools pins the main packages this module builds, so that go mod tidy keeps them.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
