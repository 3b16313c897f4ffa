package backup_test

import (
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// A keys-json object written and read back: the format of logical
// backups, which KeysExporter writes and restore.Importer reads.
func ExampleKeysJSONReader() {
	var buf bytes.Buffer
	h := backup.KeysJSONHeader{Format: backup.KeysJSONFormat, Version: backup.KeysJSONVersion, Revision: 9,
		Prefixes: []string{"/registry/namespaces/"}, Created: time.Date(2026, 11, 24, 19, 0, 0, 0, time.UTC)}
	w, _ := backup.NewKeysJSONWriter(&buf, h)
	_ = w.Write(backup.KeyValue{Key: []byte("/registry/namespaces/a"), Value: []byte("{}"), CreateRevision: 5, ModRevision: 9, Version: 2})
	_ = w.Close() // writes the end line
	fmt.Print(buf.String())

	r, _ := backup.NewKeysJSONReader(&buf)
	for {
		kv, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s = %s (revision %d)\n", kv.Key, kv.Value, r.Header().Revision)
	}
	fmt.Println("complete:", r.Complete())
	// Output:
	// {"format":"keys-json","version":2,"revision":9,"prefixes":["/registry/namespaces/"],"created":"2026-11-24T19:00:00Z"}
	// {"key":"L3JlZ2lzdHJ5L25hbWVzcGFjZXMvYQ==","create_revision":5,"mod_revision":9,"version":2,"value":"e30="}
	// {"end":"keys-json","keys":1,"sha256":"201bb1f636411ec58c94080e61338deedf30bfe80128edcb899e44bb07d76c0c"}
	// /registry/namespaces/a = {} (revision 9)
	// complete: true
}
