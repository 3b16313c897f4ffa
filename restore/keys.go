package restore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/keypage"
)

// KeySource yields keys in ascending byte order: a keys-json object, or
// the keys of a live etcd. Diff and Importer merge two of them.
type KeySource interface {
	// Next returns the next key, or io.EOF after the last.
	Next(ctx context.Context) (backup.KeyValue, error)
}

// KeyMapping selects keys of a keys-json object and renames them: only
// keys under one of Prefixes (none: every key), with StripPrefix removed
// and AddPrefix put in its place. Renaming keeps the order of keys.
type KeyMapping struct {
	Prefixes    []string
	StripPrefix string
	AddPrefix   string
}

// selects reports whether the mapping takes key.
func (m KeyMapping) selects(key []byte) bool {
	if len(m.Prefixes) == 0 {
		return true
	}
	for _, p := range m.Prefixes {
		if bytes.HasPrefix(key, []byte(p)) {
			return true
		}
	}
	return false
}

// apply renames key; ok is false when key does not start with StripPrefix.
func (m KeyMapping) apply(key []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(key, []byte(m.StripPrefix))
	if !ok {
		return nil, false
	}
	return append([]byte(m.AddPrefix), rest...), true
}

// ErrScope matches a mapping whose prefixes lie outside those a backup
// covers: an import or diff of them would read nothing from the backup,
// and treat every key there as missing from it.
var ErrScope = errors.New("prefixes outside the backup")

// Scope returns the prefixes, renamed, under which the mapping's keys
// land, for a backup that covers header (its KeysJSONHeader.Prefixes;
// none: every key): where Importer.DeleteMissing may delete and Diff
// compares. It is always within both the mapping's Prefixes and the
// backup's: a key the backup never held is never in scope. A prefix of
// the mapping that covers nothing of the backup fails with ErrScope. Nil
// means the whole keyspace.
func (m KeyMapping) Scope(header []string) ([]string, error) {
	ps, err := IntersectPrefixes(m.Prefixes, header)
	if err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		if m.StripPrefix == "" {
			return backup.NormalizePrefixes([]string{m.AddPrefix}), nil
		}
		ps = []string{m.StripPrefix}
	}
	var out []string
	for _, p := range ps {
		switch {
		case strings.HasPrefix(p, m.StripPrefix):
			out = append(out, m.AddPrefix+strings.TrimPrefix(p, m.StripPrefix))
		case strings.HasPrefix(m.StripPrefix, p):
			// Every kept key starts with StripPrefix: it lands under AddPrefix.
			out = append(out, m.AddPrefix)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no key under %q starts with the prefix to strip %q", ErrScope, ps, m.StripPrefix)
	}
	return backup.NormalizePrefixes(out), nil
}

// IntersectPrefixes returns the prefixes of the keys that lie under one
// of asked and under one of covered, where none means every key. A prefix
// of asked that shares no key with covered fails with ErrScope: `/a` and
// `/a/` give `/a/`, never `/ab`.
func IntersectPrefixes(asked, covered []string) ([]string, error) {
	asked, covered = backup.NormalizePrefixes(asked), backup.NormalizePrefixes(covered)
	switch {
	case len(asked) == 0:
		return covered, nil
	case len(covered) == 0:
		return asked, nil
	}
	var out []string
	for _, a := range asked {
		n := len(out)
		for _, c := range covered {
			switch {
			case strings.HasPrefix(a, c):
				out = append(out, a)
			case strings.HasPrefix(c, a):
				out = append(out, c)
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("%w: %q is outside the backup's prefixes %q", ErrScope, a, covered)
		}
	}
	return backup.NormalizePrefixes(out), nil
}

// keyReader reads the object of a logical backup: a
// *backup.KeysJSONReader or a *backup.KeysZipReader.
type keyReader interface {
	Next() (backup.KeyValue, error)
	Keys() int64
	Header() backup.KeysJSONHeader
	Complete() bool
}

// mappedKeys is a KeySource over a logical backup's object through a
// mapping.
type mappedKeys struct {
	r keyReader
	m KeyMapping
}

func (s *mappedKeys) Next(ctx context.Context) (backup.KeyValue, error) {
	for {
		kv, err := s.r.Next()
		if err != nil {
			return kv, err
		}
		if !s.m.selects(kv.Key) {
			continue
		}
		key, ok := s.m.apply(kv.Key)
		if !ok {
			return kv, &backup.KeysJSONError{Line: int(s.r.Keys()) + 1, Reason: fmt.Sprintf("key %q does not start with the prefix to strip %q", kv.Key, s.m.StripPrefix)}
		}
		kv.Key = key
		return kv, nil
	}
}

// EtcdKeys is a KeySource over the keys of a live etcd under prefixes
// (none: every key), read page by page at the revision of the first page.
// A page holds about backup.DefaultExportPageBytes of keys and values at
// the mean size of the keys read before it (at most
// backup.DefaultExportPageSize keys; 64 while no key was read), as an
// export's pages without streaming do, not 1,000 keys whatever their size
// (1,000 keys of 100 KiB: 100 MiB). Keys much larger than those before
// them (100 KiB secrets after a thousand small keys) still make one large
// page: etcd cannot bound a range by bytes.
type EtcdKeys struct {
	client *clientv3.Client
	ranges [][2]string // key and range end of each prefix
	i      int         // the range being read
	cursor string      // the next key to read in it; "" before its first page
	rev    int64
	page   []backup.KeyValue
	pager  keypage.Pager
}

// NewEtcdKeys returns a KeySource over the keys of c under prefixes.
func NewEtcdKeys(c *clientv3.Client, prefixes []string) *EtcdKeys {
	s := &EtcdKeys{client: c, pager: keypage.Pager{MaxKeys: backup.DefaultExportPageSize, Target: backup.DefaultExportPageBytes}}
	ps := backup.NormalizePrefixes(prefixes)
	if len(ps) == 0 {
		s.ranges = [][2]string{{"\x00", "\x00"}} // every key
	}
	for _, p := range ps {
		s.ranges = append(s.ranges, [2]string{p, clientv3.GetPrefixRangeEnd(p)})
	}
	return s
}

// Revision returns the revision the keys are read at, once the first page
// was read.
func (s *EtcdKeys) Revision() int64 { return s.rev }

// Next implements KeySource.
func (s *EtcdKeys) Next(ctx context.Context) (backup.KeyValue, error) {
	for len(s.page) == 0 {
		if s.i >= len(s.ranges) {
			return backup.KeyValue{}, io.EOF
		}
		if err := s.fetch(ctx); err != nil {
			return backup.KeyValue{}, err
		}
	}
	kv := s.page[0]
	s.page = s.page[1:]
	return kv, nil
}

// fetch reads the next page of the current range, and moves to the next
// range after the last page of one.
func (s *EtcdKeys) fetch(ctx context.Context) error {
	r := s.ranges[s.i]
	if s.cursor == "" {
		s.cursor = r[0]
	}
	limit := s.pager.Limit()
	if !s.pager.Sized() {
		// No key read yet (the first page, or after empty ranges).
		limit = min(limit, keypage.FirstKeys)
	}
	opts := []clientv3.OpOption{clientv3.WithRange(r[1]), clientv3.WithLimit(limit), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
	if s.rev > 0 {
		opts = append(opts, clientv3.WithRev(s.rev))
	}
	resp, err := s.client.Get(ctx, s.cursor, opts...)
	if err != nil {
		return fmt.Errorf("read keys: %w", err)
	}
	if s.rev == 0 {
		s.rev = resp.Header.Revision
	}
	s.pager.Saw(resp)
	for _, kv := range resp.Kvs {
		s.page = append(s.page, backup.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision,
			ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease})
	}
	if resp.More && len(resp.Kvs) > 0 {
		s.cursor = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	} else {
		s.i, s.cursor = s.i+1, ""
	}
	return nil
}

// KeyChange is one difference between two key sources.
type KeyChange struct {
	// Op is "added" (only in the second source), "removed" (only in the
	// first) or "changed" (in both, with other values).
	Op  string
	Key []byte
	// Old is the first source's key, New the second's; nil where absent.
	Old, New *backup.KeyValue
}

// mergeKeys walks a and b in step and calls fn for every key, with the
// key of a, of b, or of both.
func mergeKeys(ctx context.Context, a, b KeySource, fn func(x, y *backup.KeyValue) error) error {
	next := func(s KeySource) (*backup.KeyValue, error) {
		kv, err := s.Next(ctx)
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return &kv, nil
	}
	x, err := next(a)
	if err != nil {
		return err
	}
	y, err := next(b)
	if err != nil {
		return err
	}
	for x != nil || y != nil {
		var c int
		switch {
		case x == nil:
			c = 1
		case y == nil:
			c = -1
		default:
			c = bytes.Compare(x.Key, y.Key)
		}
		switch {
		case c < 0:
			err = fn(x, nil)
		case c > 0:
			err = fn(nil, y)
		default:
			err = fn(x, y)
		}
		if err != nil {
			return err
		}
		if c <= 0 {
			if x, err = next(a); err != nil {
				return err
			}
		}
		if c >= 0 {
			if y, err = next(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// Diff compares two key sources, from (the first) and to (the second),
// and calls fn for every key whose value differs or that only one holds.
// Only values count: revisions and versions are those of two stores.
func Diff(ctx context.Context, from, to KeySource, fn func(KeyChange) error) error {
	return mergeKeys(ctx, from, to, func(x, y *backup.KeyValue) error {
		switch {
		case y == nil:
			return fn(KeyChange{Op: "removed", Key: x.Key, Old: x})
		case x == nil:
			return fn(KeyChange{Op: "added", Key: y.Key, New: y})
		case !bytes.Equal(x.Value, y.Value):
			return fn(KeyChange{Op: "changed", Key: x.Key, Old: x, New: y})
		}
		return nil
	})
}

// OpenKeysFile opens the object of a logical backup in the file at path,
// keys-json or a keys zip (told apart by its first bytes), as a KeySource
// through m. A keys zip is refused with backup.ErrKeysZip when it would
// decode to more than maxDecoded bytes (zero: DefaultImportMaxBytes).
// Closing the returned closer closes the file.
func OpenKeysFile(path string, m KeyMapping, maxDecoded int64) (KeySource, *backup.KeysJSONHeader, io.Closer, error) {
	kr, c, err := openKeyFile(path, maxDecoded)
	if err != nil {
		return nil, nil, nil, err
	}
	h := kr.Header()
	return &mappedKeys{r: kr, m: m}, &h, c, nil
}

// openKeyFile opens the keys-json object or keys zip at path.
func openKeyFile(path string, maxDecoded int64) (keyReader, io.Closer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open keys: %w", err)
	}
	magic := make([]byte, 4)
	n, err := io.ReadFull(f, magic)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		f.Close()
		return nil, nil, fmt.Errorf("read keys: %w", err)
	}
	if !backup.IsKeysZip(magic[:n]) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("read keys: %w", err)
		}
		kr, err := backup.NewKeysJSONReader(f)
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		return kr, f, nil
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("read keys: %w", err)
	}
	zr, err := backup.NewKeysZipReader(f, st.Size(), cmp.Or(maxDecoded, DefaultImportMaxBytes))
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return zr, closers{zr, f}, nil
}

// closers closes each of its closers, in order.
type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// KeysJSONSource opens a keys-json object as a KeySource through m.
func KeysJSONSource(r io.Reader, m KeyMapping) (KeySource, *backup.KeysJSONHeader, error) {
	kr, err := backup.NewKeysJSONReader(r)
	if err != nil {
		return nil, nil, err
	}
	h := kr.Header()
	return &mappedKeys{r: kr, m: m}, &h, nil
}
