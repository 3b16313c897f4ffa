package controller

import (
	"strings"
	"testing"

	"github.com/etcdbackup/etcdbackup/backup"
)

// TestBackupName: names are valid backup names, and the namespace, name
// and UID each make another one, however the '-' join or the cut would
// merge them.
func TestBackupName(t *testing.T) {
	long := strings.Repeat("n", 63)
	seen := map[string]string{}
	for _, in := range [][3]string{
		{"a", "nightly", ""}, {"b", "nightly", ""}, {"a-b", "c", ""}, {"a", "b-c", ""},
		{"a", "nightly", "uid-1"}, {"a", "nightly", "uid-2"},
		{long, long + ".x", ""}, {long, long + ".y", ""}, {"ns", "with.dots", ""},
	} {
		got := backupName(in[0], in[1], in[2])
		if err := backup.ValidateName("backup", got); err != nil {
			t.Errorf("%q: %v", in, err)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%q and %s share the name %s", in, other, got)
		}
		seen[got] = strings.Join(in[:], "/")
	}
	if got := backupName("team-a", "nightly", ""); !strings.HasPrefix(got, "team-a-nightly-") {
		t.Errorf("name %s does not start with namespace and name", got)
	}
}
