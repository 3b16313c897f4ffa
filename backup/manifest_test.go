package backup_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
)

func validManifest() backup.Manifest {
	created := time.Date(2026, 11, 22, 2, 30, 0, 0, time.UTC)
	id := backup.BackupID("prod-a", "daily", created, true)
	return backup.Manifest{
		Format: backup.ManifestFormat, ID: id, Cluster: "prod-a", Name: "daily", Destination: "s3",
		Created: created, Completed: created.Add(time.Minute), DataKey: backup.DataKey(id, created, backup.Zstd, true),
		Raw:    backup.Digest{Size: 100, SHA256: strings.Repeat("ab", 32)},
		Stored: backup.Digest{Size: 50, SHA256: strings.Repeat("cd", 32)}, Compression: backup.Zstd,
		Encryption: &backup.EncryptionInfo{Scheme: "age", Recipients: []string{"sha256:00"}},
		Etcd:       backup.EtcdInfo{Revision: backup.RevisionInfo{Low: 5, High: 7}}, Library: "etcdbackup devel",
	}
}

// TestParseManifestRejectsHostileInput: every hostile manifest is refused
// with ErrInvalidManifest.
func TestParseManifestRejectsHostileInput(t *testing.T) {
	good := validManifest()
	body, err := good.Marshal()
	require.NoError(t, err)
	parsed, err := backup.ParseManifest(bytes.NewReader(body))
	require.NoError(t, err)
	require.Equal(t, good.ID, parsed.ID)

	mutate := func(f func(m *backup.Manifest)) string {
		m := validManifest()
		f(&m)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return string(b)
	}
	cases := map[string]string{
		"data key outside the folder": mutate(func(m *backup.Manifest) { m.DataKey = "../prod-b/x.db" }),
		"data key in a subfolder":     mutate(func(m *backup.Manifest) { m.DataKey = "sub/x.db" }),
		"data key is a manifest":      mutate(func(m *backup.Manifest) { m.DataKey = "x" + backup.ManifestSuffix }),
		"data key with control":       mutate(func(m *backup.Manifest) { m.DataKey = "x\n.db" }),
		"cluster with slash":          mutate(func(m *backup.Manifest) { m.Cluster = "prod/a" }),
		"id of another cluster":       mutate(func(m *backup.Manifest) { m.ID = "prod-b-daily" }),
		"negative size":               mutate(func(m *backup.Manifest) { m.Stored.Size = -1 }),
		"short sha256":                mutate(func(m *backup.Manifest) { m.Raw.SHA256 = "abcd" }),
		"unknown compression":         mutate(func(m *backup.Manifest) { m.Compression = "lz4" }),
		"unknown encryption":          mutate(func(m *backup.Manifest) { m.Encryption.Scheme = "rot13" }),
		"future format":               mutate(func(m *backup.Manifest) { m.Format = 99 }),
		"no created time":             mutate(func(m *backup.Manifest) { m.Created = time.Time{} }),
		"revision bounds reversed":    mutate(func(m *backup.Manifest) { m.Etcd.Revision = backup.RevisionInfo{Low: 9, High: 3} }),
		"wrong type":                  strings.Replace(string(body), `"format": 1`, `"format": "1"`, 1),
		"size beyond int64":           strings.Replace(string(body), `"size": 100`, `"size": 1e300`, 1),
		"two objects":                 string(body) + string(body),
		"not json":                    "\x00\x01\x02",
		"empty":                       "",
		"huge":                        `{"library":"` + strings.Repeat("x", backup.MaxManifestSize) + `"}`,
	}
	for name, input := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := backup.ParseManifest(strings.NewReader(input))
			require.ErrorIs(t, err, backup.ErrInvalidManifest)
			require.Less(t, len(err.Error()), 2000, "the error does not echo the input")
		})
	}
}

func TestIDAndDataNameShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"20261124T191237Z_prod-a-hourly-20261124T191237Z.db.zst", true},                 // older versions
		{"20261124T191237.123Z_prod-a-hourly-20261124T191237.123Z.db.zst", true},         // scheduled
		{"20261124T191237.123Z_prod-a-hourly-20261124T191237.123Z-0a1b2c3d.db.gz", true}, // unique
		{"20261124T191237.123Z_prod-a-once.db", true},                                    // one-shot
		{"20261124T191237.123Z_prod-a-once-0a1b2c3d.db.age", true},
		{"20261124T191237.123Z_Prod-a-once.db", false},
		{"20261124T191237.123Z_proda.db", false},
		{"20261124T191237.123Z_prod-a-once.db.txt", false},
		{"20261124T25.123Z_prod-a-once.db", false},
		{"snapshot.db", false},
	} {
		assert.Equal(t, tc.ok, backup.IsDataName(tc.name), tc.name)
	}
	m := validManifest()
	for id, ok := range map[string]bool{
		m.Cluster + "-" + m.Name:                                    true,
		m.Cluster + "-" + m.Name + "-20261124T191237Z":              true,
		m.Cluster + "-" + m.Name + "-20261124T191237.123Z":          true,
		m.Cluster + "-" + m.Name + "-20261124T191237.123Z-0a1b2c3d": true,
		m.Cluster + "-" + m.Name + "-0a1b2c3d":                      true,
		m.Cluster + "-" + m.Name + "-20261124T191237.123Z-0A1B2C3D": false,
		m.Cluster + "-" + m.Name + "-extra":                         false,
	} {
		m.ID = id
		if ok {
			assert.NoError(t, m.Validate(), id)
		} else {
			assert.ErrorIs(t, m.Validate(), backup.ErrInvalidManifest, id)
		}
	}
}
