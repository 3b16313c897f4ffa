package backup

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAppendKeyLineIsJSONMarshal: the hand-written key line is byte for
// byte what encoding/json writes, zero fields and nil slices included.
func TestAppendKeyLineIsJSONMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bytesOf := func() []byte {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []byte{}
		}
		b := make([]byte, rng.IntN(300))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	intOf := func() int64 {
		if rng.IntN(3) == 0 {
			return 0
		}
		return rng.Int64() - rng.Int64()
	}
	for range 5000 {
		kv := KeyValue{Key: bytesOf(), CreateRevision: intOf(), ModRevision: intOf(), Version: intOf(), Value: bytesOf(), Lease: intOf()}
		want, err := json.Marshal(kv)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendKeyLine(nil, kv)), "%+v", kv)
	}
}

func BenchmarkKeyLine(b *testing.B) {
	kv := KeyValue{Key: []byte("/registry/configmaps/ns-a/cm-00001"), CreateRevision: 12, ModRevision: 345, Version: 3, Value: make([]byte, 5500), Lease: 7}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(kv); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendKeyLine", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = appendKeyLine(buf[:0], kv)
		}
	})
}

// FuzzParseKeyLine: whenever the fast path accepts a line, encoding/json
// accepts it too and reads the same KeyValue.
func FuzzParseKeyLine(f *testing.F) {
	f.Add([]byte(`{"key":"L2E=","create_revision":2,"mod_revision":3,"version":2,"value":"dg==","lease":7}`))
	f.Add([]byte(`{"key":"L2E=","create_revision":02,"mod_revision":3,"version":1}`))
	f.Add([]byte(`{"key":"L2E=","create_revision":-0,"mod_revision":99999999999999999999,"version":1}`))
	f.Add([]byte(`{"key":"L2E","value":"","lease":0}`))
	f.Add([]byte(`{"key":"L2E=","value":"dg==\n"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		got, ok := parseKeyLine(line)
		if !ok {
			return
		}
		var want KeyValue
		if err := strictUnmarshal(line, &want); err != nil {
			t.Fatalf("the fast path accepts %q, encoding/json refuses it: %v", line, err)
		}
		if string(got.Key) != string(want.Key) || string(got.Value) != string(want.Value) || (got.Value == nil) != (want.Value == nil) ||
			got.CreateRevision != want.CreateRevision || got.ModRevision != want.ModRevision || got.Version != want.Version || got.Lease != want.Lease {
			t.Fatalf("%q: fast path %+v, encoding/json %+v", line, got, want)
		}
	})
}

// TestParseKeyLineRoundTrip: every line appendKeyLine writes takes the
// fast path back to the same KeyValue.
func TestParseKeyLineRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		kv := KeyValue{Key: make([]byte, 1+rng.IntN(100)), CreateRevision: 1 + rng.Int64N(1<<40), Version: rng.Int64N(3), Lease: rng.Int64N(2) * rng.Int64()}
		kv.ModRevision = kv.CreateRevision + rng.Int64N(1000)
		for i := range kv.Key {
			kv.Key[i] = byte(rng.IntN(256))
		}
		if n := rng.IntN(400); n > 0 {
			kv.Value = make([]byte, n)
			for i := range kv.Value {
				kv.Value[i] = byte(rng.IntN(256))
			}
		}
		got, ok := parseKeyLine(appendKeyLine(nil, kv))
		require.True(t, ok, "%+v", kv)
		require.Equal(t, kv, got)
	}
}
