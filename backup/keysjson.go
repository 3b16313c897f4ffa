package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The keys-json format of a logical backup. After decryption and
// decompression a keys-json object is JSON Lines: one header line, one
// line per key, in ascending byte order of keys, and an end line:
//
//	{"format":"keys-json","version":2,"revision":1234,"prefixes":["/registry/namespaces/"],"clusterID":"cdf818194e3a8c32","created":"2026-11-24T19:00:00Z"}
//	{"key":"L3JlZ2lzdHJ5L25hbWVzcGFjZXMvYQ==","create_revision":5,"mod_revision":9,"version":2,"value":"e30="}
//	{"end":"keys-json","keys":1,"sha256":"<hex sha256 of the lines before this one, newlines included>"}
//
// The header names the store revision every key was read at and the key
// prefixes that were read (none: the whole keyspace). The key lines are
// etcd KeyValues with the field names `etcdctl get -w json` prints: key
// and value in standard base64, create_revision, mod_revision, version and
// lease as numbers, zero fields left out as etcdctl leaves them out.
//
// The end line (version 2) proves the object complete: a stream cut at a
// line boundary is otherwise a valid, shorter object. A reader refuses a
// version 2 object without it, or whose count or digest differ. Version 1
// objects, written before the end line existed, are still read; nothing
// in them shows a cut, so KeysJSONReader.Complete reports false for them
// and restore.Importer deletes nothing on their word alone.

// KeysJSONFormat and KeysJSONVersion are the header's "format" and
// "version" of the keys-json objects this library writes; it reads
// versions 1 to KeysJSONVersion.
const (
	KeysJSONFormat  = "keys-json"
	KeysJSONVersion = 2
)

// keysJSONEndVersion is the first version with an end line.
const keysJSONEndVersion = 2

// KeysJSONEnd is the last line of a keys-json object of version 2: the
// number of key lines and the sha256 of every byte before the end line.
type KeysJSONEnd struct {
	End    string `json:"end"` // always KeysJSONFormat
	Keys   int64  `json:"keys"`
	SHA256 string `json:"sha256"`
}

// MaxKeysJSONLine bounds one line of a keys-json object: a key line holds
// at most etcd's largest request (1.5 MiB by default, 10 MiB at most in
// practice) in base64, so a longer line is hostile or broken.
const MaxKeysJSONLine = 16 << 20

// ErrKeysJSON matches every error about a keys-json object that cannot be
// read: a bad header, a truncated or overlong line, invalid base64, a key
// out of order or outside the header's prefixes.
var ErrKeysJSON = errors.New("invalid keys-json")

// KeysJSONError reports where a keys-json object is broken.
type KeysJSONError struct {
	Line   int // 1 is the header
	Reason string
}

// Error names the line and the problem.
func (e *KeysJSONError) Error() string {
	return fmt.Sprintf("invalid keys-json: line %d: %s", e.Line, e.Reason)
}

// Unwrap returns ErrKeysJSON.
func (e *KeysJSONError) Unwrap() error { return ErrKeysJSON }

// KeysJSONHeader is the first line of a keys-json object.
type KeysJSONHeader struct {
	Format    string    `json:"format"`
	Version   int       `json:"version"`
	Revision  int64     `json:"revision"`
	Prefixes  []string  `json:"prefixes"`
	ClusterID string    `json:"clusterID,omitempty"`
	Created   time.Time `json:"created"`
}

// Covers reports whether key lies under one of the header's prefixes (any
// key when there are none).
func (h *KeysJSONHeader) Covers(key []byte) bool {
	return coveredBy(h.Prefixes, key)
}

func coveredBy(prefixes []string, key []byte) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if bytes.HasPrefix(key, []byte(p)) {
			return true
		}
	}
	return false
}

// KeyValue is one key line of a keys-json object: an etcd KeyValue as
// etcdctl prints it in JSON.
type KeyValue struct {
	Key            []byte `json:"key"`
	CreateRevision int64  `json:"create_revision,omitempty"`
	ModRevision    int64  `json:"mod_revision,omitempty"`
	Version        int64  `json:"version,omitempty"`
	Value          []byte `json:"value,omitempty"`
	Lease          int64  `json:"lease,omitempty"`
}

// KeysJSONWriter writes a keys-json object.
type KeysJSONWriter struct {
	w       *bufio.Writer
	version int
	sum     hash.Hash // of every line written
	last    []byte
	buf     []byte // the line being written, reused
	keys    int64
	err     error
}

// appendKeyLine appends kv's line to b, byte for byte as json.Marshal
// writes it, without json.Marshal's allocations: an export writes one line
// per key. Base64 needs no JSON escaping.
func appendKeyLine(b []byte, kv KeyValue) []byte {
	b = append(b, `{"key":`...)
	if kv.Key == nil {
		b = append(b, "null"...)
	} else {
		b = appendBase64(b, kv.Key)
	}
	b = appendIntField(b, "create_revision", kv.CreateRevision)
	b = appendIntField(b, "mod_revision", kv.ModRevision)
	b = appendIntField(b, "version", kv.Version)
	if len(kv.Value) > 0 {
		b = append(b, `,"value":`...)
		b = appendBase64(b, kv.Value)
	}
	b = appendIntField(b, "lease", kv.Lease)
	return append(b, '}')
}

func appendBase64(b, v []byte) []byte {
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

// appendIntField appends `,"name":v`, or nothing for 0 (omitempty).
func appendIntField(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

// NewKeysJSONWriter writes h's line to w and returns a writer for the key
// lines. h must name the format and version this library writes.
func NewKeysJSONWriter(w io.Writer, h KeysJSONHeader) (*KeysJSONWriter, error) {
	if err := h.validate(); err != nil {
		return nil, err
	}
	kw := &KeysJSONWriter{w: bufio.NewWriterSize(w, 64<<10), version: h.Version, sum: sha256.New()}
	line, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode keys-json header: %w", err)
	}
	kw.line(line)
	return kw, kw.err
}

func (kw *KeysJSONWriter) line(b []byte) {
	if kw.err != nil {
		return
	}
	if _, err := kw.w.Write(b); err != nil {
		kw.err = err
		return
	}
	kw.sum.Write(b)
	kw.sum.Write(newline)
	kw.err = kw.w.WriteByte('\n')
}

var newline = []byte{'\n'}

// Write writes one key line. Keys must come in ascending byte order.
func (kw *KeysJSONWriter) Write(kv KeyValue) error {
	if kw.err != nil {
		return kw.err
	}
	if kw.keys > 0 && bytes.Compare(kv.Key, kw.last) <= 0 {
		return fmt.Errorf("keys-json: key %q written after %q", kv.Key, kw.last)
	}
	kw.buf = appendKeyLine(kw.buf[:0], kv)
	kw.line(kw.buf)
	kw.last = append(kw.last[:0], kv.Key...)
	kw.keys++
	return kw.err
}

// Keys returns the number of key lines written.
func (kw *KeysJSONWriter) Keys() int64 { return kw.keys }

// Close ends the object: it writes the end line (version 2 and later),
// which counts the keys and digests every line before it, and flushes.
// An object is complete only once Close returned nil; no key may be
// written after it. Close does not close the underlying writer.
func (kw *KeysJSONWriter) Close() error {
	if kw.err != nil {
		return kw.err
	}
	if kw.version >= keysJSONEndVersion {
		end, err := json.Marshal(KeysJSONEnd{End: KeysJSONFormat, Keys: kw.keys, SHA256: hex.EncodeToString(kw.sum.Sum(nil))})
		if err != nil {
			return fmt.Errorf("encode keys-json end line: %w", err)
		}
		kw.line(end)
	}
	if kw.err == nil {
		kw.err = kw.w.Flush()
	}
	if kw.err != nil {
		return kw.err
	}
	kw.err = errWriterClosed
	return nil
}

var errWriterClosed = errors.New("keys-json writer is closed")

// Flush writes what is buffered, without ending the object (see Close).
func (kw *KeysJSONWriter) Flush() error {
	if kw.err != nil {
		return kw.err
	}
	kw.err = kw.w.Flush()
	return kw.err
}

func (h *KeysJSONHeader) validate() error {
	bad := func(format string, args ...any) error {
		return &KeysJSONError{Line: 1, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case h.Format != KeysJSONFormat:
		return bad("format %q is not %q", h.Format, KeysJSONFormat)
	case h.Version < 1 || h.Version > KeysJSONVersion:
		return bad("version %d is not supported (this library reads 1 to %d)", h.Version, KeysJSONVersion)
	case h.Revision < 1:
		return bad("revision %d is not a store revision", h.Revision)
	case h.Created.IsZero():
		return bad("created time is missing")
	}
	for _, p := range h.Prefixes {
		if p == "" {
			return bad("an empty prefix (leave prefixes out to mean every key)")
		}
	}
	return nil
}

// KeysJSONReader reads a keys-json object line by line, checking each
// line as it goes: memory is bounded by MaxKeysJSONLine whatever the
// object's size.
type KeysJSONReader struct {
	br       *bufio.Reader
	header   KeysJSONHeader
	line     int
	last     []byte
	buf      []byte    // the line being read, reused
	sum      hash.Hash // of every line before the end line
	keys     int64
	complete bool // the end line was read and matched
}

// NewKeysJSONReader reads and checks the header line of r.
func NewKeysJSONReader(r io.Reader) (*KeysJSONReader, error) {
	kr := &KeysJSONReader{br: bufio.NewReaderSize(r, 64<<10), sum: sha256.New()}
	line, err := kr.readLine()
	if err == io.EOF {
		return nil, &KeysJSONError{Line: 1, Reason: "no header line"}
	}
	if err != nil {
		return nil, err
	}
	if err := strictUnmarshal(line, &kr.header); err != nil {
		return nil, &KeysJSONError{Line: 1, Reason: "header: " + err.Error()}
	}
	if err := kr.header.validate(); err != nil {
		return nil, err
	}
	kr.sum.Write(line)
	kr.sum.Write(newline)
	return kr, nil
}

// Header returns the object's header.
func (kr *KeysJSONReader) Header() KeysJSONHeader {
	h := kr.header
	h.Prefixes = slices.Clone(h.Prefixes)
	return h
}

// Keys returns the number of key lines read so far.
func (kr *KeysJSONReader) Keys() int64 { return kr.keys }

// Complete reports whether the object proved it is complete: its end line
// was read and matched the keys and bytes before it. It is false before
// Next returned io.EOF, and always for a version 1 object, which has no
// end line: such an object cut at a line boundary reads as a valid
// shorter one.
func (kr *KeysJSONReader) Complete() bool { return kr.complete }

// Next returns the next key line, or io.EOF after the last. A line that
// is not a valid KeyValue, a key out of order, outside the header's
// prefixes or modified after the header's revision yields a
// *KeysJSONError, and so does a version 2 object whose end line is
// missing, does not match, or is followed by anything.
func (kr *KeysJSONReader) Next() (KeyValue, error) {
	if kr.complete {
		return KeyValue{}, io.EOF
	}
	line, err := kr.readLine()
	if err == io.EOF && kr.header.Version >= keysJSONEndVersion {
		return KeyValue{}, &KeysJSONError{Line: kr.line, Reason: "truncated: the end line is missing"}
	}
	if err != nil {
		return KeyValue{}, err
	}
	bad := func(format string, args ...any) (KeyValue, error) {
		return KeyValue{}, &KeysJSONError{Line: kr.line, Reason: fmt.Sprintf(format, args...)}
	}
	kv, ok := parseKeyLine(line)
	if !ok {
		if end, isEnd := parseEndLine(line); isEnd {
			return KeyValue{}, kr.end(end)
		}
		if err := strictUnmarshal(line, &kv); err != nil {
			return bad("%v", err)
		}
	}
	kr.sum.Write(line)
	kr.sum.Write(newline)
	switch {
	case len(kv.Key) == 0:
		return bad("empty key")
	case kr.keys > 0 && bytes.Compare(kv.Key, kr.last) <= 0:
		return bad("key %s is not after %s", quoteKey(kv.Key), quoteKey(kr.last))
	case !kr.header.Covers(kv.Key):
		return bad("key %s is outside the prefixes %q", quoteKey(kv.Key), kr.header.Prefixes)
	case kv.ModRevision > kr.header.Revision || kv.CreateRevision > kv.ModRevision || kv.CreateRevision < 1:
		return bad("key %s has revisions created %d, modified %d, for a read at %d", quoteKey(kv.Key), kv.CreateRevision, kv.ModRevision, kr.header.Revision)
	case kv.Version < 1 || kv.Lease < 0:
		return bad("key %s has version %d and lease %d", quoteKey(kv.Key), kv.Version, kv.Lease)
	}
	kr.last = append(kr.last[:0], kv.Key...)
	kr.keys++
	return kv, nil
}

// parseEndLine reports whether line is an end line, and decodes it.
func parseEndLine(line []byte) (KeysJSONEnd, bool) {
	var end KeysJSONEnd
	if !bytes.HasPrefix(line, []byte(`{"end":`)) || strictUnmarshal(line, &end) != nil {
		return end, false
	}
	return end, true
}

// end checks the end line and that nothing follows it, and returns io.EOF
// when the object is complete.
func (kr *KeysJSONReader) end(end KeysJSONEnd) error {
	bad := func(format string, args ...any) error {
		return &KeysJSONError{Line: kr.line, Reason: fmt.Sprintf(format, args...)}
	}
	sum := hex.EncodeToString(kr.sum.Sum(nil))
	switch {
	case kr.header.Version < keysJSONEndVersion:
		return bad("an end line in a version %d object", kr.header.Version)
	case end.End != KeysJSONFormat:
		return bad("end line of %q, not %q", end.End, KeysJSONFormat)
	case end.Keys != kr.keys:
		return bad("the end line counts %d keys, the object holds %d", end.Keys, kr.keys)
	case !strings.EqualFold(end.SHA256, sum):
		return bad("the end line's sha256 %s differs from the object's, %s", end.SHA256, sum)
	}
	if _, err := kr.readLine(); err != io.EOF {
		if err != nil {
			return err
		}
		return bad("data after the end line")
	}
	kr.complete = true
	return io.EOF
}

// readLine returns the next line without its newline. A line longer than
// MaxKeysJSONLine, or a last line without its newline (a truncated
// object), is a *KeysJSONError.
func (kr *KeysJSONReader) readLine() ([]byte, error) {
	kr.line++
	line := kr.buf[:0]
	defer func() { kr.buf = line[:0] }()
	for {
		chunk, err := kr.br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxKeysJSONLine+1 {
			return nil, &KeysJSONError{Line: kr.line, Reason: fmt.Sprintf("longer than %d bytes", MaxKeysJSONLine)}
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(line) == 0:
			return nil, io.EOF
		case err == io.EOF:
			return nil, &KeysJSONError{Line: kr.line, Reason: "truncated: the last line has no newline"}
		default:
			return nil, err
		}
	}
}

// parseKeyLine decodes a key line written as appendKeyLine writes it:
// the fields in that order, integers without leading zeros, base64 with
// nothing to unescape. It reports false for any other line, valid JSON or
// not, which strictUnmarshal then decodes or refuses: the fast path
// accepts nothing encoding/json would not. Key and value share one
// allocation.
func parseKeyLine(line []byte) (kv KeyValue, ok bool) {
	p := keyLineParser{rest: line}
	key, ok := p.base64Field(`{"key":`, false)
	if !ok {
		return KeyValue{}, false
	}
	kv.CreateRevision, ok = p.intField(`,"create_revision":`)
	if ok {
		kv.ModRevision, ok = p.intField(`,"mod_revision":`)
	}
	if ok {
		kv.Version, ok = p.intField(`,"version":`)
	}
	var value []byte
	if ok {
		value, ok = p.base64Field(`,"value":`, true)
	}
	if ok {
		kv.Lease, ok = p.intField(`,"lease":`)
	}
	if !ok || string(p.rest) != "}" {
		return KeyValue{}, false
	}
	enc := base64.StdEncoding
	buf := make([]byte, enc.DecodedLen(len(key))+enc.DecodedLen(len(value)))
	n, err := enc.Decode(buf, key)
	if err != nil || n == 0 {
		return KeyValue{}, false
	}
	kv.Key = buf[:n:n]
	if value != nil {
		m, err := enc.Decode(buf[n:], value)
		if err != nil || m == 0 {
			return KeyValue{}, false
		}
		kv.Value = buf[n : n+m : n+m]
	}
	return kv, true
}

// keyLineParser reads the fields of a key line in order.
type keyLineParser struct{ rest []byte }

// base64Field reads name and a quoted run of base64 characters, returned
// undecoded. An absent optional field returns nil and true.
func (p *keyLineParser) base64Field(name string, optional bool) ([]byte, bool) {
	if !bytes.HasPrefix(p.rest, []byte(name)) {
		return nil, optional
	}
	s := p.rest[len(name):]
	if len(s) < 2 || s[0] != '"' {
		return nil, false
	}
	end := bytes.IndexByte(s[1:], '"')
	if end < 1 {
		return nil, false
	}
	v := s[1 : 1+end]
	for _, c := range v {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '=') {
			return nil, false
		}
	}
	p.rest = s[end+2:]
	return v, true
}

// intField reads name and an integer as JSON writes it. An absent field is
// 0 (omitempty).
func (p *keyLineParser) intField(name string) (int64, bool) {
	if !bytes.HasPrefix(p.rest, []byte(name)) {
		return 0, true
	}
	s := p.rest[len(name):]
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := i
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	if i == digits || (s[digits] == '0' && i > digits+1) {
		return 0, false
	}
	v, err := strconv.ParseInt(string(s[:i]), 10, 64)
	if err != nil {
		return 0, false
	}
	p.rest = s[i:]
	return v, true
}

// strictUnmarshal decodes one JSON object, refusing unknown fields and
// trailing data, so that a damaged line is not half read.
func strictUnmarshal(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var ce base64.CorruptInputError
		if errors.As(err, &ce) {
			return fmt.Errorf("invalid base64: %v", err)
		}
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// quoteKey quotes a key for an error message, cut to a readable length.
func quoteKey(k []byte) string {
	const max = 80
	if len(k) > max {
		return fmt.Sprintf("%q...", k[:max])
	}
	return fmt.Sprintf("%q", k)
}

// NormalizePrefixes sorts prefixes and drops each one another covers, so
// that reading them in order reads every key once, in ascending order.
// An empty prefix means the whole keyspace: the result is then nil.
func NormalizePrefixes(prefixes []string) []string {
	ps := slices.Clone(prefixes)
	slices.Sort(ps)
	var out []string
	for _, p := range ps {
		if p == "" {
			return nil
		}
		if len(out) > 0 && strings.HasPrefix(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}
