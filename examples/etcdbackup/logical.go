package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

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
		identities       fileList
		quiet            bool
	)
	dest.register(fs)
	etcd.register(fs)
	encoding.register(fs)
	fs.StringVar(&fromBackup, "from-backup", "", "turn this snapshot backup `ID` (or latest) of the destination into keys-json, offline, instead of reading a live etcd")
	fs.Var(&identities, "identity", "age identity `file` to decrypt the --from-backup snapshot with; repeatable")
	fs.Var(&prefixes, "prefix", "export only the keys under this `prefix`; repeatable (default: every key)")
	fs.StringVar(&name, "name", "export", "backup `name`: the ID is CLUSTER-NAME-TIMESTAMP")
	fs.BoolVar(&quiet, "quiet", false, "print no progress")
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
		pipeline.Snapshotter = &backup.KeysExporter{Client: cli, Prefixes: prefixes}
	}
	req := backup.Request{Cluster: dest.cluster, Name: name, Scheduled: true, Kind: backup.ManifestKindKeysJSON}
	if dest.destination == streamDestination {
		req.Targets = []backup.Target{{Destination: "stdout", Uploader: &streamUploader{w: s.stdout}}}
	} else {
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
			b, err := sel.find(ctx, []restore.Source{{Name: d.Name(), Catalog: d}}, dest.cluster)
			if err != nil {
				return err
			}
			pipeline.Snapshotter = &restore.SnapshotExporter{Restorer: r, Backup: b, Prefixes: prefixes}
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
	fs.StringVar(&tempDir, "temp-dir", "", "`directory` for the verified copy of the backup (default: the system's)")
	if err := fs.parse(s, args); err != nil {
		return err
	}
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
	sel.quiet = true
	r, err := sel.restorer(s, fs)
	if err != nil {
		return err
	}
	cli, err := etcd.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	im.Client, im.Logger = cli, fs.logger(s)

	var res *restore.ImportResult
	if from == "-" {
		dec, err := restore.DecodeStream(s.stdin, r.Identities)
		if err != nil {
			return err
		}
		defer dec.Close()
		res, err = im.Import(ctx, dec)
		if err != nil {
			return importError(err)
		}
	} else {
		if res, err = importBackup(ctx, s, fs, &dest, &sel, r, &im, tempDir); err != nil {
			return importError(err)
		}
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
	if _, err := r.Fetch(ctx, b, path); err != nil {
		return nil, err
	}
	return im.ImportFile(ctx, path)
}

// importError makes a broken keys-json object or an import that may not
// run as asked an invalid-input error.
func importError(err error) error {
	if errors.Is(err, backup.ErrKeysJSON) || errors.Is(err, restore.ErrImport) {
		return invalidInput(err)
	}
	return err
}

func printImport(w io.Writer, r *restore.ImportResult) {
	verb := "imported"
	if r.DryRun {
		verb = "would import (dry run)"
	}
	fmt.Fprintf(w, "%s %d keys read at revision %d: %d created, %d overwritten, %d unchanged, %d left as they were (create-only), %d deleted\n",
		verb, r.Keys, r.Revision, r.Created, r.Overwritten, r.Unchanged, r.Conflicts, r.Deleted)
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
	)
	dest.register(fs)
	etcd.register(fs)
	sel.register(fs)
	fs.StringVar(&against, "against", "", "compare with this other keys-json backup `ID` instead of a live etcd")
	fs.Var(&prefixes, "prefix", "compare only the keys under this `prefix`; repeatable (default: the backup's)")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if err := dest.validate(); err != nil {
		return err
	}
	if (against == "") == (len(etcd.endpoints) == 0) {
		return usagef("give --endpoints (a live etcd) or --against (another backup), one of them")
	}
	sel.quiet = true
	r, err := sel.restorer(s, fs)
	if err != nil {
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
	from, header, err := fetchKeys(ctx, r, sources, dest.cluster, sel.backup, filepath.Join(dir, "from.jsonl"), prefixes)
	if err != nil {
		return err
	}
	var to restore.KeySource
	if against != "" {
		if to, _, err = fetchKeys(ctx, r, sources, dest.cluster, against, filepath.Join(dir, "to.jsonl"), prefixes); err != nil {
			return err
		}
	} else {
		cli, err := etcd.client()
		if err != nil {
			return err
		}
		defer cli.Close()
		scope := []string(prefixes)
		if len(scope) == 0 {
			scope = header.Prefixes
		}
		to = restore.NewEtcdKeys(cli, scope)
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
		return json.NewEncoder(s.stdout).Encode(map[string]any{"changes": changes, "count": n})
	}
	return nil
}

// diffChange is a line of diff's JSON output.
type diffChange struct {
	Op  string `json:"op"`
	Key string `json:"key"`
}

// fetchKeys fetches and verifies backup id into path as keys-json, and
// opens it as a KeySource limited to prefixes: a keys-json backup as it
// is, a snapshot turned into keys-json offline.
func fetchKeys(ctx context.Context, r *restore.Restorer, sources []restore.Source, cluster, id, path string, prefixes []string) (restore.KeySource, *backup.KeysJSONHeader, error) {
	q := restore.Query{Cluster: cluster, Kind: backup.KindKeysJSON}
	if id != "latest" {
		q.ID = id
	}
	b, err := restore.Find(ctx, sources, q)
	switch {
	case err == nil:
		if _, err := r.Fetch(ctx, b, path); err != nil {
			return nil, nil, err
		}
	case id != "latest" && (errors.Is(err, restore.ErrNoBackup) || errors.Is(err, restore.ErrNotRestorable)):
		q.Kind = ""
		if b, err = restore.Find(ctx, sources, q); err != nil {
			return nil, nil, err
		}
		if err := snapshotKeysFile(ctx, r, b, prefixes, path); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	// The file is removed with its directory when the command ends.
	return restore.KeysJSONSource(f, restore.KeyMapping{Prefixes: prefixes})
}

func snapshotKeysFile(ctx context.Context, r *restore.Restorer, b restore.Backup, prefixes []string, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, _, err = r.SnapshotKeys(ctx, b, prefixes, f)
	return errors.Join(err, f.Close())
}
