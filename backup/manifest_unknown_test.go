package backup

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestManifestKeepsUnknownFields: a manifest read with
// ParseManifestKeepingUnknown is written back with the fields this version
// does not know; one read with ParseManifest, or Known, without them, as
// json.MarshalIndent writes it.
func TestManifestKeepsUnknownFields(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := Manifest{Format: ManifestFormat, Cluster: "prod", Name: "full", Destination: "a", Created: created, Completed: created,
		Compression: None, Stored: Digest{Size: 1, SHA256: string(bytes.Repeat([]byte("a"), 64))}}
	m.Raw = m.Stored
	m.ID = BackupID(m.Cluster, m.Name, m.Created, true)
	m.DataKey = DataKey(m.ID, m.Created, m.Compression, false)
	plain, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	indented, err := json.MarshalIndent(&m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plain, append(indented, '\n')) {
		t.Fatalf("Marshal:\n%s\nwant:\n%s", plain, indented)
	}
	var obj map[string]any
	if err := json.Unmarshal(plain, &obj); err != nil {
		t.Fatal(err)
	}
	obj["zNew"], obj["aNew"] = []any{1.0, "x"}, map[string]any{"k": true}
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := ParseManifestKeepingUnknown(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	out, err := kept.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(back) != len(obj) || back["aNew"] == nil || back["zNew"] == nil {
		t.Fatalf("written back:\n%s", out)
	}
	known := kept.Known()
	if out, err = known.Marshal(); err != nil || !bytes.Equal(out, plain) {
		t.Fatalf("Known: %v\n%s", err, out)
	}
	parsed, err := ParseManifest(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if out, err = parsed.Marshal(); err != nil || !bytes.Equal(out, plain) {
		t.Fatalf("ParseManifest: %v\n%s", err, out)
	}
}
