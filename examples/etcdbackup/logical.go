package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/restore"
)

// streamDestination is --destination=-: the stored bytes go to stdout.
const streamDestination = "-"

func runExport(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("export", "(--endpoints=HOST:PORT[,...] | --from-backup=ID) --destination=URL|NAME|- --cluster=NAME [--prefix=P]... [flags]").withOutput()
	var (
		dest             destinationFlags
		etcd             etcdFlags
		encoding         encodingFlags
		prefixes         fileList
		name, fromBackup string
		typ              string
		sock             socketFlags
		identities       fileList
		quiet            bool
	)
	dest.register(fs)
	etcd.register(fs)
	encoding.register(fs)
	fs.StringVar(&typ, "type", backup.ManifestKindKeysJSON, "the backup `type`: keys-json (JSON Lines) or keys (a zip with one file per key and an index)")
	fs.StringVar(&fromBackup, "from-backup", "", "turn this snapshot backup `ID` (or latest) of the destination into a logical backup, offline, instead of reading a live etcd")
	sock.register(fs, false)
	fs.Var(&identities, "identity", "age identity `file` to decrypt the --from-backup snapshot with; repeatable")
	fs.Var(&prefixes, "prefix", "export only the keys under this `prefix`; repeatable (default: every key)")
	fs.StringVar(&name, "name", "export", "backup `name`: the ID is CLUSTER-NAME-TIMESTAMP")
	fs.BoolVar(&quiet, "quiet", false, "print no progress")
	maxRaw := registerMaxRawSize(fs)
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if err := dest.validate(); err != nil {
		return err
	}
	if fromBackup == "" {
		if err := etcd.validate(); err != nil {
			return err
		}
	} else if dest.destination == streamDestination {
		return usagef("--from-backup reads the snapshot from --destination: give a URL or a name")
	}
	if err := backup.ValidateName("backup", name); err != nil {
		return invalidInput(err)
	}
	if !backup.IsLogicalKind(typ) {
		return usagef("--type %q: want keys-json or keys", typ)
	}
	comp, enc, err := encoding.parse(s)
	if err != nil {
		return err
	}
	pipeline := &backup.Pipeline{Compression: comp, Encryption: enc, Logger: fs.logger(s), MemoryBudget: encoding.compressorMemory()}
	if fromBackup == "" {
		cli, err := etcd.client(backup.ExportDialOptions()...)
		if err != nil {
			return err
		}
		defer cli.Close()
		pipeline.Snapshotter = &backup.KeysExporter{Client: cli, Prefixes: prefixes, Kind: typ}
	}
	req := backup.Request{Cluster: dest.cluster, Name: name, Scheduled: true, Kind: typ}
	switch {
	case dest.destination == streamDestination:
		req.Targets = []backup.Target{{Destination: "stdout", Uploader: &streamUploader{w: s.stdout}}}
	case isSocketURL(dest.destination):
		if fromBackup != "" {
			return usagef("--from-backup reads the snapshot from --destination: give a URL or a name")
		}
		t, err := sock.target(dest.destination)
		if err != nil {
			return err
		}
		req.Targets = []backup.Target{t}
	default:
		reg, d, err := openDestination(ctx, &dest, encoding.registry(fs.logger(s)))
		if err != nil {
			return err
		}
		defer reg.Close()
		req.Targets = []backup.Target{d.Target()}
		if fromBackup != "" {
			sel := selectFlags{backup: fromBackup, identities: identities, quiet: true}
			r, err := sel.restorer(s, fs)
			if err != nil {
				return err
			}
			if r.MaxRawSize, err = maxRaw(); err != nil {
				return err
			}
			b, err := sel.find(ctx, []restore.Source{{Name: d.Name(), Catalog: d}}, dest.cluster)
			if err != nil {
				return err
			}
			pipeline.Snapshotter = &restore.SnapshotExporter{Restorer: r, Backup: b, Prefixes: prefixes, Kind: typ}
		}
		if !quiet {
			pipeline.Observer = &saveProgress{w: s.stderr}
		}
	}
	res, err := pipeline.Run(ctx, req)
	if err != nil {
		return err
	}
	if dest.destination != streamDestination {
		return fs.emit(s.stdout, saveOutput(res), func(w io.Writer) error { _, err := fmt.Fprintln(w, res.ID); return err })
	}
	return nil
}

// registerMaxRawSize adds --max-raw-size, the bound of
// restore.Restorer.MaxRawSize, and returns its value once parsed.
func registerMaxRawSize(fs *flagSet) func() (int64, error) {
	n := byteSize(restore.DefaultMaxRawSize)
	fs.Var(&n, "max-raw-size", "refuse a backup that decodes to more than `SIZE` bytes (KiB, MiB, GiB; its manifest's raw size bounds it too)")
	return func() (int64, error) {
		if n <= 0 {
			return 0, usagef("--max-raw-size %d: want a positive size", n)
		}
		return int64(n), nil
	}
}

// streamUploader writes the stored bytes to a pipe. A stream has no
// manifest: its reader relies on the checks of its own format.
type streamUploader struct{ w io.Writer }

func (u *streamUploader) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	_, err := io.Copy(u.w, r)
	return err
}

func (u *streamUploader) Commit(context.Context, *backup.Manifest) error { return nil }

func runImport(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("import", "--endpoints=HOST:PORT[,...] (--destination=URL|NAME --cluster=NAME [--backup=ID|latest] | --from=-) [--prefix=P]... [flags]").withOutput()
	var (
		dest       destinationFlags
		etcd       etcdFlags
		sel        selectFlags
		im         restore.Importer
		prefixes   fileList
		from, mode string
		tempDir    string
	)
	dest.register(fs)
	etcd.register(fs)
	sel.register(fs)
	fs.StringVar(&from, "from", "", "read the stored bytes from stdin (-) instead of a destination")
	fs.Var(&prefixes, "prefix", "import only the keys under this `prefix` of the backup; repeatable (default: every key)")
	fs.StringVar(&mode, "mode", string(restore.CreateOnly), "create-only (existing keys are left alone) or overwrite")
	fs.BoolVar(&im.DryRun, "dry-run", false, "say what would change, change nothing")
	fs.StringVar(&im.Mapping.StripPrefix, "strip-prefix", "", "remove this `prefix` from every imported key")
	fs.StringVar(&im.Mapping.AddPrefix, "add-prefix", "", "put this `prefix` before every imported key")
	fs.BoolVar(&im.DeleteMissing, "delete-missing", false, "delete the keys under the imported prefixes that the backup does not hold")
	fs.StringVar((*string)(&im.Leases), "leases", string(restore.SkipLeased), "keys that had a lease in the source: skip them, or import them without-lease (they never expire)")
	fs.StringVar(&tempDir, "temp-dir", "", "`directory` for the verified copy of the backup (default: the system's)")
	maxBytes, maxRequest := byteSize(restore.DefaultImportMaxBytes), byteSize(restore.DefaultMaxRequestBytes)
	fs.Var(&maxBytes, "max-bytes", "refuse a backup that decodes to more than `SIZE` bytes (KiB, MiB, GiB)")
	fs.Var(&maxRequest, "max-request-bytes", "the target etcd's --max-request-bytes `SIZE`: a larger key is refused before anything is written")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if maxBytes <= 0 || maxRequest <= 0 || maxRequest > 1<<31 {
		return usagef("--max-bytes and --max-request-bytes take a positive size")
	}
	im.MaxBytes, im.MaxRequestBytes = int64(maxBytes), int(maxRequest)
	s.memoryBudget(defaultMemory) // an import's memory is that of a backup's download at the default budget
	if err := etcd.validate(); err != nil {
		return err
	}
	if from != "" && from != "-" {
		return usagef("--from takes - (stdin) only")
	}
	if from == "" {
		if err := dest.validate(); err != nil {
			return err
		}
	}
	im.Mode, im.Mapping.Prefixes, im.TempDir = restore.ImportMode(mode), prefixes, tempDir
	if im.Mode != restore.CreateOnly && im.Mode != restore.Overwrite {
		return usagef("--mode %q: want create-only or overwrite", mode)
	}
	if im.Leases != restore.SkipLeased && im.Leases != restore.WithoutLease {
		return usagef("--leases %q: want skip or without-lease", im.Leases)
	}
	sel.quiet = true
	r, err := sel.restorer(s, fs)
	if err != nil {
		return err
	}
	// A backup decodes to at most what an import would copy of a stream.
	r.MaxRawSize = im.MaxBytes
	cli, err := etcd.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	im.Client, im.Logger = cli, fs.logger(s)

	var res *restore.ImportResult
	if from == "-" {
		dec, derr := restore.DecodeStream(s.stdin, r.Identities)
		if derr != nil {
			return derr
		}
		defer dec.Close()
		res, err = im.Import(ctx, dec)
	} else {
		res, err = importBackup(ctx, s, fs, &dest, &sel, r, &im, tempDir)
	}
	if err != nil {
		if res != nil && res.NotWritten != nil {
			// Part of the import was committed: say how much, on stdout
			// as a result, since the keys are in etcd now.
			_ = fs.emit(s.stdout, res, func(w io.Writer) error { printImport(w, res); return nil })
		}
		return importError(err)
	}
	return fs.emit(s.stdout, res, func(w io.Writer) error { printImport(w, res); return nil })
}

// importBackup fetches and verifies the keys-json backup the flags select
// into a temporary file, then imports it.
func importBackup(ctx context.Context, s *streams, fs *flagSet, dest *destinationFlags, sel *selectFlags,
	r *restore.Restorer, im *restore.Importer, tempDir string) (*restore.ImportResult, error) {
	reg, d, err := openDestination(ctx, dest, destination.Options{Logger: fs.logger(s)})
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	q := restore.Query{Cluster: dest.cluster, Kind: backup.KindKeysJSON}
	if sel.backup != "latest" {
		q.ID = sel.backup
	}
	b, err := restore.Find(ctx, []restore.Source{{Name: d.Name(), Catalog: d}}, q)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(tempDir, "etcdbackup-import-")
	if err != nil {
		return nil, fmt.Errorf("create import directory: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "keys.jsonl")
	fetched, err := r.Fetch(ctx, b, path)
	if err != nil {
		return nil, err
	}
	im.ManifestChecked = fetched.ManifestChecked
	return im.ImportFile(ctx, path)
}

// importError makes a broken keys-json object or an import that may not
// run as asked an invalid-input error. A broken object matches
// restore.ErrIntegrity too, as a damaged snapshot does.
func importError(err error) error {
	switch {
	case errors.Is(err, backup.ErrKeysJSON) && !errors.Is(err, restore.ErrIntegrity):
		return invalidInput(fmt.Errorf("%w: %w", restore.ErrIntegrity, err))
	case errors.Is(err, backup.ErrKeysJSON), errors.Is(err, restore.ErrImport), errors.Is(err, restore.ErrScope):
		return invalidInput(err)
	}
	return err
}

func printImport(w io.Writer, r *restore.ImportResult) {
	verb := "imported"
	switch {
	case r.DryRun:
		verb = "would import (dry run)"
	case r.NotWritten != nil:
		verb = "stopped part-way, having imported"
	}
	fmt.Fprintf(w, "%s %d keys read at revision %d: %d created, %d overwritten, %d unchanged, %d left as they were (create-only), %d deleted\n",
		verb, r.Keys, r.Revision, r.Created, r.Overwritten, r.Unchanged, r.Conflicts, r.Deleted)
	if r.NotWritten != nil {
		if r.MayBeWritten {
			fmt.Fprintf(w, "  %d keys were written; the batch from %q on may or may not be written, nothing after it was\n", r.Written(), r.NotWritten)
		} else {
			fmt.Fprintf(w, "  %d keys were written; from %q on, nothing was\n", r.Written(), r.NotWritten)
		}
	}
	if r.Leased > 0 {
		fmt.Fprintf(w, "  %d keys had a lease in the source: %s\n", r.Leased, map[restore.LeasePolicy]string{
			restore.SkipLeased: "skipped (--leases=skip)", restore.WithoutLease: "imported without a lease (--leases=without-lease)"}[r.Leases])
	}
	if r.KeptLeased > 0 {
		fmt.Fprintf(w, "  %d keys of the target with a lease and not in the backup were left alone (--leases=skip)\n", r.KeptLeased)
	}
	if !r.Complete {
		fmt.Fprintf(w, "  the backup cannot prove it is complete (a version 1 object without its manifest): keys after a cut would be missing\n")
	}
	for _, c := range r.Changes {
		fmt.Fprintf(w, "  %s %q\n", c.Op, c.Key)
	}
}

func runDiff(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("diff", "--destination=URL|NAME --cluster=NAME --backup=ID|latest (--endpoints=HOST:PORT[,...] | --against=ID) [--prefix=P]...").withOutput()
	var (
		dest     destinationFlags
		etcd     etcdFlags
		sel      selectFlags
		against  string
		prefixes fileList
		exitZero bool
	)
	dest.register(fs)
	etcd.register(fs)
	sel.register(fs)
	fs.StringVar(&against, "against", "", "compare with this other keys-json backup `ID` instead of a live etcd")
	fs.BoolVar(&exitZero, "exit-zero", false, "exit 0 when keys differ (by default 1, as diff(1))")
	fs.Var(&prefixes, "prefix", "compare only the keys under this `prefix`; repeatable (default: the backup's)")
	maxRaw := registerMaxRawSize(fs)
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if err := dest.validate(); err != nil {
		return err
	}
	if (against == "") == (len(etcd.endpoints) == 0) {
		return usagef("give --endpoints (a live etcd) or --against (another backup), one of them")
	}
	if against == "" {
		if err := etcd.validate(); err != nil {
			return err
		}
	}
	sel.quiet = true
	r, err := sel.restorer(s, fs)
	if err != nil {
		return err
	}
	if r.MaxRawSize, err = maxRaw(); err != nil {
		return err
	}
	reg, d, err := openDestination(ctx, &dest, destination.Options{Logger: fs.logger(s)})
	if err != nil {
		return err
	}
	defer reg.Close()
	dir, err := os.MkdirTemp("", "etcdbackup-diff-")
	if err != nil {
		return fmt.Errorf("create diff directory: %w", err)
	}
	defer os.RemoveAll(dir)
	sources := []restore.Source{{Name: d.Name(), Catalog: d}}
	var cli *clientv3.Client
	defer func() {
		if cli != nil {
			cli.Close()
		}
	}()
	client := func() (c *clientv3.Client, err error) {
		cli, err = etcd.client()
		return cli, err
	}
	from, to, err := diffSources(ctx, r, sources, dest.cluster, sel.backup, against, dir, prefixes, client)
	if err != nil {
		return importError(err)
	}
	n := 0
	var changes []diffChange
	asJSON := *fs.output == "json"
	err = restore.Diff(ctx, from, to, func(c restore.KeyChange) error {
		n++
		if asJSON {
			changes = append(changes, diffChange{Op: string(c.Op), Key: string(c.Key)})
			return nil
		}
		_, err := fmt.Fprintf(s.stdout, "%s %q\n", c.Op, c.Key)
		return err
	})
	if err != nil {
		return importError(err)
	}
	fmt.Fprintf(s.stderr, "%d keys differ\n", n)
	if asJSON {
		if changes == nil {
			changes = []diffChange{}
		}
		if err := json.NewEncoder(s.stdout).Encode(map[string]any{"changes": changes, "count": n}); err != nil {
			return err
		}
	}
	if n > 0 && !exitZero {
		return errKeysDiffer
	}
	return nil
}

// errKeysDiffer ends a diff that found differences with exit code 1, as
// diff(1) does, and no error line: the count was printed.
var errKeysDiffer = errors.New("keys differ")

// diffChange is a line of diff's JSON output.
type diffChange struct {
	Op  string `json:"op"`
	Key string `json:"key"`
}

// diffSources opens the two sides of a diff: backup id, and the backup
// against or, without it, the live etcd. Both are read within the same
// scope, the prefixes asked for within those both sides cover, so that a
// key one side never read is not reported as added or removed.
func diffSources(ctx context.Context, r *restore.Restorer, sources []restore.Source, cluster, id, against, dir string,
	prefixes []string, client func() (*clientv3.Client, error)) (from, to restore.KeySource, err error) {
	fromPath := filepath.Join(dir, "from.jsonl")
	header, err := fetchKeys(ctx, r, sources, cluster, id, fromPath, prefixes)
	if err != nil {
		return nil, nil, err
	}
	scope, err := restore.KeyMapping{Prefixes: prefixes}.Scope(header.Prefixes)
	if err != nil {
		return nil, nil, err
	}
	if against != "" {
		toPath := filepath.Join(dir, "to.jsonl")
		other, err := fetchKeys(ctx, r, sources, cluster, against, toPath, scope)
		if err != nil {
			return nil, nil, err
		}
		if scope, err = (restore.KeyMapping{Prefixes: scope}).Scope(other.Prefixes); err != nil {
			return nil, nil, err
		}
		if to, err = openKeys(toPath, scope); err != nil {
			return nil, nil, err
		}
	} else {
		cli, err := client()
		if err != nil {
			return nil, nil, err
		}
		to = restore.NewEtcdKeys(cli, scope)
	}
	if from, err = openKeys(fromPath, scope); err != nil {
		return nil, nil, err
	}
	return from, to, nil
}

// openKeys opens the keys-json or keys zip file at path as a KeySource of
// the keys under scope. The file is removed with its directory when the
// command ends.
func openKeys(path string, scope []string) (restore.KeySource, error) {
	src, _, _, err := restore.OpenKeysFile(path, restore.KeyMapping{Prefixes: scope}, 0)
	return src, err
}

// fetchKeys fetches and verifies backup id into path as keys-json and
// returns its header: a keys-json backup as it is, a snapshot turned into
// keys-json of prefixes offline.
func fetchKeys(ctx context.Context, r *restore.Restorer, sources []restore.Source, cluster, id, path string, prefixes []string) (*backup.KeysJSONHeader, error) {
	q := restore.Query{Cluster: cluster, Kind: backup.KindKeysJSON}
	if id != "latest" {
		q.ID = id
	}
	b, err := restore.Find(ctx, sources, q)
	switch {
	case err == nil:
		if _, err := r.Fetch(ctx, b, path); err != nil {
			return nil, err
		}
	case id != "latest" && (errors.Is(err, restore.ErrNoBackup) || errors.Is(err, restore.ErrNotRestorable)):
		q.Kind = ""
		if b, err = restore.Find(ctx, sources, q); err != nil {
			return nil, err
		}
		if err := snapshotKeysFile(ctx, r, b, prefixes, path); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	_, h, c, err := restore.OpenKeysFile(path, restore.KeyMapping{}, 0)
	if err != nil {
		return nil, err
	}
	return h, c.Close()
}

func snapshotKeysFile(ctx context.Context, r *restore.Restorer, b restore.Backup, prefixes []string, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, _, err = r.SnapshotKeys(ctx, b, prefixes, f)
	return errors.Join(err, f.Close())
}
