package main

import (
	"testing"
)

// TestQuickstart runs the README's main job: it fails unless every key is
// restored with its value.
func TestQuickstart(t *testing.T) {
	if err := run(t.Context()); err != nil {
		t.Fatal(err)
	}
}
