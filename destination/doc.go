// Package destination keeps the named destinations backups are written to
// and restored from: seed 000's several buckets per seed, each with its own
// endpoint and credentials, and seed 004's backup targets with a default,
// an availability condition and a periodic sync of what they hold.
//
// # Specs and URLs
//
// A Spec names a destination and says where it is, as a URL
//
//	s3://bucket/prefix?endpoint=HOST:PORT&region=R&insecure=true&pathStyle=true&adaptiveParts=true
//	gs://bucket/prefix
//	azblob://container/prefix?account=A
//	file:///abs/dir
//	mem://name
//
// or, as older configurations do, as the S3 fields Endpoint, Bucket, Prefix
// and Region. Credentials never ride in the URL: ParseURL refuses user
// information and parameters named like credentials (ErrCredentialsInURL)
// without repeating them. Spec.Credentials says where the keys are (a
// host-resolved secret, key files, environment variables, the IAM role or
// the default chain), never what they are, so a Spec may be logged. For
// azblob:// destinations the keys are a storage account and its shared key.
// What a spec reads is sent to the endpoint the same spec names, so the
// host decides which files, environment variables and IAM endpoint specs
// may name (Options.CredentialSources): none by default, as suits a host
// whose specs come from tenants; AnySource for one whose operator writes
// them. A gs:// destination whose URL names an endpoint and has no
// credentials talks to that endpoint anonymously: the process's Google
// credentials only ever go to Google.
//
// Two destinations may not share objects: locations are compared by their
// store in canonical form (default ports, trailing dots, the regional
// endpoints of Amazon S3, Azure's default domain; an Azure location without
// an account may be any account's), so that two spellings of one bucket
// are one location.
//
// # Registry
//
// A Registry is a value the host owns. It is changed one destination at a
// time (Add, Update, Remove, SetDefault) or reconciled in one call to a
// desired set (Apply), as a controller does on every change of its
// configuration; Apply reports what it added, updated and removed. Its
// rules each fail with a sentinel of their own: invalid names
// (backup.ErrInvalidName), renames (ErrNameImmutable), shared or nested
// locations (ErrLocationInUse), a missing default (ErrNoDefault), removing
// the default (ErrRemoveDefault). LegacyConfig turns the deprecated
// single-bucket fields into a destination named "default".
//
// Updating a destination reopens its client and resolves its credentials
// again: that is how credentials rotate. A backup under way keeps the
// client it started with, and writes its manifest next to its data even if
// the destination moved meanwhile; the inventory survives unless the
// location changed.
//
// # Destinations
//
// A *Destination is the destination's storage.Bucket, confined to its
// prefix, its backup.Uploader and its backup.Catalog: a host hands it to a
// backup.Pipeline (Target), to restore and to retention as it is. A
// read-only destination refuses writes and deletes with ErrReadOnly and
// still serves reads, so restore works and retention, which checks
// ReadOnly, leaves it alone.
//
// # Availability and inventory
//
// Run checks each destination periodically by listing at most one key
// under its prefix, and keeps a Status: Available, or Unavailable with a
// Reason (auth, missing-bucket, no-space, unreachable, timeout, error), a message
// without secrets, the time of the last check and the count of consecutive
// failures. Transitions go to the Observer, to the log and, through
// Collector, to the gauge etcdbackup_destination_available{destination}.
//
// Run also syncs each destination's inventory: it lists the destination
// once, takes the first path segment of each key that is a valid cluster
// name as a cluster folder, and classifies each folder with
// backup.ListBackups (backups, legacy snapshots, orphans, invalid
// manifests, foreign objects), reading only the manifests that changed.
// The host queries the result per destination (Inventory) or per cluster
// across destinations (Entries), with what each sync added and removed.
// Removing a destination forgets its inventory; nothing is ever deleted
// from a store by this package.
//
// Intervals are per destination (Spec.CheckInterval, Spec.PollInterval)
// with registry-wide defaults; Check and Sync run one now.
package destination
