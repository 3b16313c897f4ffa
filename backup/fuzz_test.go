package backup_test

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/etcdbackup/etcdbackup/backup"
)

// FuzzValidateName checks that an accepted name can never escape a folder
// or carry anything a store treats specially.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"prod-a", "", "a/b", "..", "a\x00b", "über", strings.Repeat("a", 64), "-a", "a-", "A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := backup.ValidateName("cluster", name)
		if err != nil {
			if !strings.Contains(err.Error(), "invalid cluster name") {
				t.Fatalf("error without context: %v", err)
			}
			if len(err.Error()) > 300 {
				t.Fatalf("error of %d bytes echoes too much input", len(err.Error()))
			}
			if !utf8.ValidString(err.Error()) {
				t.Fatalf("error is not valid UTF-8")
			}
			return
		}
		if name == "" || len(name) > backup.MaxNameLen || strings.ContainsAny(name, "/\\.\x00 ") ||
			strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") {
			t.Fatalf("accepted %q", name)
		}
		for _, c := range []byte(name) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				t.Fatalf("accepted byte %q in %q", c, name)
			}
		}
	})
}

// FuzzParseManifest checks that no input panics the parser and that every
// accepted manifest keeps its data object inside the cluster's folder.
func FuzzParseManifest(f *testing.F) {
	valid := `{"format":1,"id":"prod-a-daily-20261122T023000Z","cluster":"prod-a","name":"daily","destination":"s3",` +
		`"created":"2026-11-22T02:30:00Z","completed":"2026-11-22T02:31:00Z",` +
		`"dataKey":"20261122T023000Z_prod-a-daily-20261122T023000Z.db.zst.age",` +
		`"etcd":{"version":"3.7.3","revision":{"low":5,"high":5}},` +
		`"raw":{"size":100,"sha256":"` + strings.Repeat("ab", 32) + `"},` +
		`"stored":{"size":50,"sha256":"` + strings.Repeat("cd", 32) + `"},` +
		`"compression":"zstd","encryption":{"scheme":"age","recipients":["sha256:00"]},"library":"etcdbackup devel"}`
	for _, s := range []string{
		valid,
		strings.Replace(valid, `"dataKey":"`, `"dataKey":"../../`, 1),
		strings.Replace(valid, `"format":1`, `"format":"1"`, 1),
		strings.Replace(valid, `"size":100`, `"size":-1`, 1),
		strings.Replace(valid, `"size":100`, `"size":1e300`, 1),
		`{}`, `[]`, `null`, ``, `{"format":1}{"format":1}`,
		strings.Repeat(`{"a":`, 10000),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := backup.ParseManifest(bytes.NewReader(data))
		if err != nil {
			return
		}
		if strings.ContainsAny(m.DataKey, "/\\") || m.DataKey == "" {
			t.Fatalf("accepted data key %q", m.DataKey)
		}
		if backup.ValidateName("cluster", m.Cluster) != nil || m.Raw.Size < 0 || m.Stored.Size < 0 {
			t.Fatalf("accepted manifest %+v", m)
		}
		if _, err := m.Marshal(); err != nil {
			t.Fatalf("an accepted manifest does not marshal: %v", err)
		}
	})
}
