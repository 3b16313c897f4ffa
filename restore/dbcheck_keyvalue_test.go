package restore

import (
	"bytes"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// keyValueSeeds are values of etcd's "key" bucket, good and bad, built by
// hand where proto.Marshal cannot write them.
func keyValueSeeds(t testing.TB) map[string][]byte {
	good, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte("/registry/pods/a"), CreateRevision: 2, ModRevision: 9, Version: 3, Value: bytes.Repeat([]byte("v"), 300), Lease: 7})
	if err != nil {
		t.Fatal(err)
	}
	key := func(k string) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte(k))
	}
	tag := protowire.AppendTag
	return map[string][]byte{
		"good":                      good,
		"no key":                    protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 5),
		"key as a varint":           protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 5),
		"key then a varint key":     protowire.AppendVarint(tag(key("/a"), 1, protowire.VarintType), 5),
		"key then an empty key":     append(key("/a"), key("")...),
		"empty key then a key":      append(key(""), key("/a")...),
		"unknown field":             protowire.AppendBytes(tag(key("/a"), 99, protowire.BytesType), []byte("x")),
		"unknown group":             tag(protowire.AppendVarint(tag(tag(key("/a"), 7, protowire.StartGroupType), 8, protowire.VarintType), 1), 7, protowire.EndGroupType),
		"group never ended":         tag(key("/a"), 7, protowire.StartGroupType),
		"end without a start":       tag(key("/a"), 7, protowire.EndGroupType),
		"field number 0":            append(key("/a"), 0x02, 0x00),
		"field number at the max":   protowire.AppendBytes(tag(key("/a"), protowire.MaxValidNumber, protowire.BytesType), nil),
		"field number max+1":        append(protowire.AppendVarint(key("/a"), uint64(protowire.MaxValidNumber+1)<<3|2), 0),
		"truncated value":           good[:len(good)-3],
		"key longer than the value": append(tag(nil, 1, protowire.BytesType), 0x7f, '/'),
		"fixed32 and fixed64":       protowire.AppendFixed64(protowire.AppendFixed32(tag(tag(key("/a"), 5, protowire.Fixed32Type), 6, protowire.Fixed64Type), 1), 2),
		"overlong varint":           append(tag(key("/a"), 2, protowire.VarintType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f),
		"reserved wire type 6":      append(key("/a"), 0x0e),
		"not a message":             {0xff, 0xff, 0xff},
		"nothing":                   nil,
	}
}

// decodesAsEtcd is the check checkKeyValue replaces: proto.Unmarshal into
// a KeyValue, and a key.
func decodesAsEtcd(v []byte) bool {
	var kv mvccpb.KeyValue
	return proto.Unmarshal(v, &kv) == nil && len(kv.Key) > 0
}

// TestCheckKeyValue: checkKeyValue accepts a value of etcd's "key" bucket
// exactly when proto.Unmarshal decodes it into a KeyValue with a key.
func TestCheckKeyValue(t *testing.T) {
	accepted := 0
	for name, v := range keyValueSeeds(t) {
		want := decodesAsEtcd(v)
		if err := checkKeyValue(v); (err == nil) != want {
			t.Errorf("%s (%x): checkKeyValue says %v, proto.Unmarshal accepts: %v", name, v, err, want)
		}
		if want {
			accepted++
		}
	}
	if accepted < 5 {
		t.Fatalf("only %d of the seeds decode: the test no longer compares both sides", accepted)
	}
}

// FuzzCheckKeyValue: whatever the bytes, checkKeyValue and proto.Unmarshal
// into a KeyValue (with a key) agree.
func FuzzCheckKeyValue(f *testing.F) {
	for _, v := range keyValueSeeds(f) {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		want := decodesAsEtcd(v)
		if err := checkKeyValue(v); (err == nil) != want {
			t.Fatalf("%x: checkKeyValue says %v, proto.Unmarshal accepts: %v", v, err, want)
		}
	})
}

// BenchmarkCheckKeyValue: the check against the decoding it replaces, on
// a value of 5 KiB (the bench etcd's objects are 1-8 KiB).
func BenchmarkCheckKeyValue(b *testing.B) {
	v, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte("/registry/configmaps/ns/name"), CreateRevision: 2, ModRevision: 9, Version: 3, Value: bytes.Repeat([]byte("v"), 5<<10)})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(v)))
		b.ReportAllocs()
		for b.Loop() {
			if !decodesAsEtcd(v) {
				b.Fatal("no KeyValue")
			}
		}
	})
	b.Run("check", func(b *testing.B) {
		b.SetBytes(int64(len(v)))
		b.ReportAllocs()
		for b.Loop() {
			if checkKeyValue(v) != nil {
				b.Fatal("no KeyValue")
			}
		}
	})
}
