//go:build !benchlean

package main

import (
	"strings"
	"testing"
	"time"
)

// The remote follower rows render from results, in the stores' order,
// and the section says so when pitr-remote did not run.
func TestContinuousRemoteRows(t *testing.T) {
	if got := renderContinuousRemote(nil); !strings.Contains(got, "Not measured by this run") || strings.Contains(got, "| store |") {
		t.Errorf("rendered without figures:\n%s", got)
	}
	m := map[string]*pitrReport{
		"tls-100ms": {Command: "make bench", Asked: 1000, Rate: 998, Segments: 20, LagP50: 1234 * time.Millisecond, LagP99: 2345 * time.Millisecond, LagMax: 3 * time.Second, HWM: 50 << 20},
		"tls":       {Command: "make bench", Asked: 1000, Rate: 999, Segments: 21, LagP50: 1100 * time.Millisecond, LagP99: 1200 * time.Millisecond, LagMax: 2 * time.Second, HWM: 48 << 20},
	}
	got := renderContinuousRemote(m)
	for _, want := range []string{
		"| MinIO over TLS, no added RTT | 1000, 999 | 21 | 1.1s | 1.2s | 2s | 48 MiB |",
		"| MinIO over TLS at 100ms RTT | 1000, 998 | 20 | 1.234s | 2.345s | 3s | 50 MiB |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing row %q in:\n%s", want, got)
		}
	}
	if strings.Index(got, "no added RTT") > strings.Index(got, "100ms RTT") {
		t.Errorf("rows out of the stores' order:\n%s", got)
	}
}
