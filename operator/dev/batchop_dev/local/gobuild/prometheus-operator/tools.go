//go:build tools

// Package tools pins the main packages this module builds, so that go mod tidy keeps them.
package tools

import (
	_ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
	_ "github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
)
