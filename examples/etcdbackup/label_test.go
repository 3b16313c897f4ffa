package main

import "testing"

// TestFlagLabel: an error names a --destination given by name as given,
// and one given by URL without its secrets.
func TestFlagLabel(t *testing.T) {
	for in, want := range map[string]string{
		"offsite": "offsite",
		"s3://AKIA:hunter2@minio:9000/b/p?secret=x": "s3://minio:9000/b/p",
		"not a name or URL hunter2":                 "<invalid URL>",
	} {
		if got := flagLabel(in); got != want {
			t.Errorf("flagLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
