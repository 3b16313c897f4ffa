package destination

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	gcblob "gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// Defaults of Options.
const (
	DefaultCheckInterval = time.Minute
	DefaultPollInterval  = 5 * time.Minute
	DefaultCheckTimeout  = 10 * time.Second
)

// DefaultName is the name of the destination a legacy single-destination
// configuration becomes (see LegacyConfig), and the default of a desired
// set that names none (see Desired).
const DefaultName = "default"

// Options configures a Registry. Every zero value means the documented
// default.
type Options struct {
	// Drivers open the gs:// and azblob:// destinations: pass
	// gcs.Driver() (package storage/blob/gcs) and azure.Driver() (package
	// storage/blob/azure) for the clouds the host uses. The registry links
	// no cloud SDK by itself; a destination of a cloud whose driver is
	// missing is refused with ErrNoDriver, which names the package.
	Drivers []blob.Driver

	// Mux opens the URLs of file:// and mem:// destinations, and of
	// gs:// and azblob:// destinations without credentials (s3:// ones
	// are opened with storage/s3). Nil means a mux of the file and mem
	// drivers and of the Drivers' URL openers, on which mem://name names
	// an in-memory bucket that lives as long as the registry, whatever
	// the updates.
	Mux *gcblob.URLMux

	// Secrets resolves the credentials of destinations whose
	// Credentials.Source is SourceSecret. Nil refuses such destinations.
	Secrets SecretResolver

	// CredentialSources are the files, environment variables and IAM
	// endpoint specs may name for their credentials. The zero value
	// allows none (see CredentialSources); AnySource allows all.
	CredentialSources CredentialSources

	// Observer receives availability transitions and inventory changes.
	// Nil means none.
	Observer Observer

	// Logger receives what the registry does: destinations added, updated
	// and removed, availability transitions, failed syncs. Nil is silent.
	Logger *slog.Logger

	// Now returns the current time, for statuses, inventories and object
	// locks. Nil means time.Now.
	Now func() time.Time

	// CheckInterval is the time between availability checks of a
	// destination whose Spec.CheckInterval is zero. Zero means
	// DefaultCheckInterval.
	CheckInterval time.Duration

	// PollInterval is the time between inventory syncs of a destination
	// whose Spec.PollInterval is zero. Zero means DefaultPollInterval.
	PollInterval time.Duration

	// CheckTimeout bounds one availability check; a check that takes
	// longer reports ReasonTimeout. Zero means DefaultCheckTimeout.
	CheckTimeout time.Duration

	// PartSize and PartsInFlight tune the uploads to s3 destinations (see
	// s3.Options): each upload holds up to PartSize x PartsInFlight bytes,
	// in parts of PartSize bytes, or sized to the store's pace with
	// AdaptiveParts (for every s3 destination; a URL's adaptiveParts=true
	// sets it for one), which only stores that accept parts of several
	// sizes take. Zero means storage/s3's defaults.
	PartSize      int64
	PartsInFlight int
	AdaptiveParts bool

	// Schemes registers a host's own backends by URL scheme: a
	// destination whose URL is "<scheme>://<bucket>/<prefix>[?params]"
	// is opened by Schemes[scheme], and the registry confines the bucket
	// to the prefix and checks, syncs and validates it as any other. The
	// built-in schemes (s3, gs, azblob, file, mem) cannot be replaced.
	// Such destinations take no Credentials: the opener brings its own.
	Schemes map[string]Opener

	// LegacyNames, when set, returns the clusters and backup config names
	// the host knows, by which inventory syncs attribute the backups of
	// the single-bucket world, stored at the top of a destination, to
	// their clusters (see backup.LegacyNames). Nil leaves such objects
	// out of the inventory.
	LegacyNames func() backup.LegacyNames

	// Users, when set, names the backup configs that use a destination,
	// as the host knows its configs. Remove, and an Update or Apply that
	// moves a destination to another location, refuse a destination that
	// has users with an *InUseError (ErrInUse), unless forced (Force,
	// Desired.Force): removing it would fail their jobs, moving it would
	// strand their earlier backups. Rotating credentials and every other
	// change stay allowed. Nil means the registry knows of no users.
	// Users is called while the change that asks holds the registry's
	// changes: it must not change the registry itself (Add, Update,
	// Remove, SetDefault, Apply, ApplyEach would wait for ever).
	Users func(destination string) []string
}

// Opener opens the bucket of a host's own scheme (see Options.Schemes)
// at loc: loc.Bucket is the URL's host, loc.Params its query. The bucket
// is confined to loc.Prefix by the registry. If the bucket is an
// io.Closer, the registry closes it when it is replaced or removed.
type Opener func(ctx context.Context, loc Location) (storage.Bucket, error)

// customScheme reports whether the host registered scheme.
func (r *Registry) customScheme(scheme string) bool {
	_, ok := r.opts.Schemes[scheme]
	return ok
}

// ChangeOption tunes Remove and Update.
type ChangeOption func(*changeOptions)

type changeOptions struct{ force bool }

// Force lets Remove or Update change a destination that backup configs
// use (see Options.Users): the host takes responsibility for them.
func Force() ChangeOption { return func(o *changeOptions) { o.force = true } }

func changeOpts(opts []ChangeOption) changeOptions {
	var o changeOptions
	for _, fn := range opts {
		fn(&o)
	}
	return o
}

// inUse returns an *InUseError when configs use the destination name and
// the change is not forced.
func (r *Registry) inUse(name, change string, force bool) error {
	return inUseBy(r.opts.Users, name, change, force)
}

// inUseBy is inUse with the users of a destination given by users.
func inUseBy(usersOf func(string) []string, name, change string, force bool) error {
	if force || usersOf == nil {
		return nil
	}
	users := usersOf(name)
	if len(users) == 0 {
		return nil
	}
	users = slices.Clone(users)
	slices.Sort(users)
	return &InUseError{Destination: name, Change: change, Users: users}
}

// Validate checks the options.
func (o Options) Validate() error {
	switch {
	case o.CheckInterval < 0:
		return fmt.Errorf("check interval %v is negative", o.CheckInterval)
	case o.PollInterval < 0:
		return fmt.Errorf("poll interval %v is negative", o.PollInterval)
	case o.CheckTimeout < 0:
		return fmt.Errorf("check timeout %v is negative", o.CheckTimeout)
	}
	seen := map[string]bool{}
	for _, d := range o.Drivers {
		switch {
		case d.Scheme != SchemeGCS && d.Scheme != SchemeAzure:
			return fmt.Errorf("driver of scheme %s: drivers are for %s and %s", paramName(d.Scheme), SchemeGCS, SchemeAzure)
		case d.URLOpener == nil || d.OpenKey == nil:
			return fmt.Errorf("driver of scheme %s: want a URL opener and a key opener", d.Scheme)
		case seen[d.Scheme]:
			return fmt.Errorf("driver of scheme %s given twice", d.Scheme)
		}
		seen[d.Scheme] = true
	}
	for scheme, open := range o.Schemes {
		switch {
		case scheme == SchemeS3, scheme == SchemeGCS, scheme == SchemeAzure, scheme == SchemeFile, scheme == SchemeMem:
			return fmt.Errorf("scheme %s is built in and cannot be replaced", paramName(scheme))
		case scheme == "" || strings.ToLower(scheme) != scheme || open == nil:
			return fmt.Errorf("scheme %s: want a lowercase scheme and an opener", paramName(scheme))
		}
	}
	if err := (s3.Options{Bucket: "any-bucket", PartSize: o.PartSize, PartsInFlight: o.PartsInFlight}).Validate(); err != nil {
		return err
	}
	return o.CredentialSources.validate()
}

// Registry holds the named destinations of a host: a value the host owns
// and configures, by single changes (Add, Update, Remove, SetDefault) or by
// reconciling it to a desired set (Apply), which is what a controller
// watching its configuration does on every change.
//
// Its rules, each with its own error: names are valid DNS labels
// (backup.ErrInvalidName) and never change (ErrNameImmutable, ErrExists);
// no two destinations share or nest their locations (ErrLocationInUse); a
// registry that holds destinations has exactly one default, and the
// default cannot be removed (ErrNoDefault, ErrRemoveDefault).
//
// Run checks every destination's availability and syncs its inventory
// periodically until its context ends. A Registry is safe for concurrent
// use.
type Registry struct {
	opts Options
	log  *slog.Logger
	mux  *gcblob.URLMux

	memMu    sync.Mutex
	mem      map[string]storage.Bucket
	memClose []func()

	writeMu sync.Mutex // serialises changes, which open clients outside mu

	mu      sync.RWMutex
	dests   map[string]*Destination
	def     string
	closed  bool
	running bool
	changed chan struct{} // wakes Run when destinations come and go
}

// NewRegistry returns an empty registry.
func NewRegistry(opts Options) (*Registry, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("registry options: %w", err)
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = DefaultCheckInterval
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.CheckTimeout == 0 {
		opts.CheckTimeout = DefaultCheckTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := opts.Mux
	if mux == nil {
		mux = new(gcblob.URLMux)
		// fileblob writes its temporary files next to the object: the
		// rename from os.TempDir fails when the directory is a mounted
		// volume of another file system.
		mux.RegisterBucket(fileblob.Scheme, &fileblob.URLOpener{Options: fileblob.Options{NoTempDir: true}})
		mux.RegisterBucket(memblob.Scheme, &memblob.URLOpener{})
		for _, d := range opts.Drivers {
			mux.RegisterBucket(d.Scheme, d.URLOpener)
		}
	}
	return &Registry{
		opts:    opts,
		log:     log,
		mux:     mux,
		mem:     map[string]storage.Bucket{},
		dests:   map[string]*Destination{},
		changed: make(chan struct{}, 1),
	}, nil
}

func (r *Registry) now() time.Time { return r.opts.Now() }

func (r *Registry) observe(e Event) {
	if r.opts.Observer != nil {
		r.opts.Observer.Observe(e)
	}
}

// validate checks spec against the registry's abilities too.
func (r *Registry) validate(spec Spec) (Location, error) {
	loc, err := spec.validate(r.customScheme)
	if err != nil {
		return Location{}, err
	}
	if err := r.checkDriver(spec, loc); err != nil {
		return Location{}, &SpecError{Name: spec.Name, Field: "url", Err: err}
	}
	if err := r.opts.CredentialSources.check(spec.Credentials); err != nil {
		return Location{}, &SpecError{Name: spec.Name, Field: "credentials", Err: err}
	}
	if spec.Credentials.Source == SourceSecret && r.opts.Secrets == nil {
		return Location{}, &SpecError{Name: spec.Name, Field: "credentials", Err: errors.New("source secret, but the registry has no secret resolver")}
	}
	return loc, nil
}

// overlap returns the name of a destination among others (name ->
// location) whose location overlaps loc, skipping name itself.
func overlap(name string, loc Location, others map[string]Location) string {
	var names []string
	for other, l := range others {
		if other != name && l.Overlaps(loc) {
			names = append(names, other)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return names[0]
}

func locationInUse(name string, loc Location, other string, otherLoc Location) error {
	how := "is nested with that of"
	if loc.within() == otherLoc.within() {
		how = "is that of"
	}
	return fmt.Errorf("destination %s: %w: %s %s destination %s (%s)", quote(name), ErrLocationInUse, loc, how, quote(other), otherLoc)
}

// locations returns the current locations by name. The caller holds mu.
func (r *Registry) locations() map[string]Location {
	m := make(map[string]Location, len(r.dests))
	for name, d := range r.dests {
		m[name] = d.Location()
	}
	return m
}

func (r *Registry) newDestination(spec Spec, loc Location) *Destination {
	return &Destination{
		name:      spec.Name,
		reg:       r,
		log:       r.log.With("destination", spec.Name),
		wakeCheck: make(chan struct{}, 1),
		wakeSync:  make(chan struct{}, 1),
		spec:      spec,
		loc:       loc,
		pins:      map[string]pin{},
		status:    Status{State: StateUnknown},
	}
}

// Add registers a new destination and opens its store. The first
// destination added becomes the default. A store that cannot be opened
// (credentials that cannot be resolved, a missing directory) does not fail
// Add: the destination is registered Unavailable and opened again at each
// availability check. Add fails with an error matching ErrInvalidSpec,
// ErrExists, ErrLocationInUse or ErrClosed.
func (r *Registry) Add(ctx context.Context, spec Spec) (*Destination, error) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	loc, err := r.validate(spec)
	if err != nil {
		return nil, err
	}
	r.mu.RLock()
	closed := r.closed
	_, exists := r.dests[spec.Name]
	locs := r.locations()
	r.mu.RUnlock()
	switch {
	case closed:
		return nil, ErrClosed
	case exists:
		return nil, fmt.Errorf("%w: %s", ErrExists, quote(spec.Name))
	}
	if other := overlap(spec.Name, loc, locs); other != "" {
		return nil, locationInUse(spec.Name, loc, other, locs[other])
	}

	d := r.newDestination(spec, loc)
	d.h, d.openErr = r.open(ctx, spec, loc)
	r.mu.Lock()
	r.dests[spec.Name] = d
	if r.def == "" {
		r.def = spec.Name
	}
	isDefault := r.def == spec.Name
	r.mu.Unlock()
	nudge(r.changed)
	d.log.Info("destination added", "location", loc.String(), "default", isDefault, "readOnly", spec.ReadOnly)
	if d.openErr != nil {
		r.record(d, d.gen, d.openErr)
	}
	return d, nil
}

// Update replaces the spec of the destination called name and reopens its
// store, resolving its credentials again: that is how credentials are
// rotated. spec.Name must be name or empty. Backups under way finish on
// the client they started with; the inventory is kept unless the location
// changed. Update fails with an error matching ErrInvalidSpec,
// ErrNameImmutable, ErrNotFound, ErrLocationInUse or ErrClosed; a store
// that cannot be opened makes the destination Unavailable, as for Add.
func (r *Registry) Update(ctx context.Context, name string, spec Spec, opts ...ChangeOption) (*Destination, error) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	if spec.Name == "" {
		spec.Name = name
	}
	if spec.Name != name {
		return nil, fmt.Errorf("%w: %s cannot become %s; remove it and add a new destination", ErrNameImmutable, quote(name), quote(spec.Name))
	}
	loc, err := r.validate(spec)
	if err != nil {
		return nil, err
	}
	r.mu.RLock()
	closed := r.closed
	d, exists := r.dests[name]
	locs := r.locations()
	r.mu.RUnlock()
	switch {
	case closed:
		return nil, ErrClosed
	case !exists:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, quote(name))
	}
	if other := overlap(name, loc, locs); other != "" {
		return nil, locationInUse(name, loc, other, locs[other])
	}
	if loc != d.Location() {
		if err := r.inUse(name, "move", changeOpts(opts).force); err != nil {
			return nil, err
		}
	}
	h, openErr := r.open(ctx, spec, loc)
	r.install(d, spec, loc, h, openErr)
	d.log.Info("destination updated", "location", loc.String(), "readOnly", spec.ReadOnly)
	return d, nil
}

// install gives d a new spec and client and records an open failure.
func (r *Registry) install(d *Destination, spec Spec, loc Location, h *handle, openErr error) {
	d.replace(spec, loc, h, openErr)
	if openErr != nil {
		d.mu.RLock()
		gen := d.gen
		d.mu.RUnlock()
		r.record(d, gen, openErr)
	}
}

// Remove unregisters the destination called name and forgets its
// inventory. Nothing is deleted from its store. Backups under way on it
// finish. It fails with ErrNotFound; with ErrRemoveDefault for the default
// destination (make another one the default first) and for the one named
// DefaultName, whatever holds the default role; and with ErrInUse while
// backup configs use it (see Options.Users), unless forced.
func (r *Registry) Remove(name string, opts ...ChangeOption) error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.mu.RLock()
	_, ok := r.dests[name]
	r.mu.RUnlock()
	if ok && name == DefaultName {
		return fmt.Errorf("%w: %s is never removed", ErrRemoveDefault, quote(name))
	}
	if ok {
		if err := r.inUse(name, "remove", changeOpts(opts).force); err != nil {
			return err
		}
	}
	r.mu.Lock()
	d, ok := r.dests[name]
	switch {
	case r.closed:
		r.mu.Unlock()
		return ErrClosed
	case !ok:
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNotFound, quote(name))
	case name == r.def:
		r.mu.Unlock()
		return fmt.Errorf("%w: %s; make another destination the default first", ErrRemoveDefault, quote(name))
	}
	delete(r.dests, name)
	r.mu.Unlock()
	d.remove()
	nudge(r.changed)
	d.log.Info("destination removed; its objects are left in place")
	return nil
}

// Get returns the destination called name, or ErrNotFound.
func (r *Registry) Get(name string) (*Destination, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.dests[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, quote(name))
	}
	return d, nil
}

// List returns the destinations ordered by name.
func (r *Registry) List() []*Destination {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Destination, 0, len(r.dests))
	for _, d := range r.dests {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b *Destination) int { return cmp.Compare(a.name, b.name) })
	return out
}

// Default returns the default destination, or ErrNoDefault when the
// registry is empty.
func (r *Registry) Default() (*Destination, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.def == "" {
		return nil, ErrNoDefault
	}
	return r.dests[r.def], nil
}

// SetDefault makes the destination called name the default, or fails with
// ErrNotFound.
func (r *Registry) SetDefault(name string) error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if _, ok := r.dests[name]; !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, quote(name))
	}
	if r.def != name {
		r.log.Info("default destination changed", "from", r.def, "to", name)
	}
	r.def = name
	return nil
}

// Check checks the availability of the destination called name now, and
// returns its new status. Run does the same periodically.
func (r *Registry) Check(ctx context.Context, name string) (Status, error) {
	d, err := r.Get(name)
	if err != nil {
		return Status{}, err
	}
	return r.check(ctx, d), nil
}

// Sync syncs the inventory of the destination called name now. The error
// is the sync's; the Inventory returned is the destination's in any case.
// Run does the same periodically.
func (r *Registry) Sync(ctx context.Context, name string) (Inventory, error) {
	d, err := r.Get(name)
	if err != nil {
		return Inventory{}, err
	}
	return r.sync(ctx, d)
}

// Inventory returns what the destination called name held at its last
// sync, or ErrNotFound.
func (r *Registry) Inventory(name string) (Inventory, error) {
	d, err := r.Get(name)
	if err != nil {
		return Inventory{}, err
	}
	return d.Inventory(), nil
}

// Entries returns the inventory entries of cluster on every destination,
// oldest first (ties by destination, then key). Restorable entries are
// what a restore may choose from.
func (r *Registry) Entries(cluster string) []Entry {
	var out []Entry
	for _, d := range r.List() {
		out = append(out, d.Inventory().Cluster(cluster)...)
	}
	slices.SortStableFunc(out, func(a, b Entry) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Destination, b.Destination), cmp.Compare(a.Key, b.Key))
	})
	return out
}

// Close detaches every destination and releases the registry's clients
// once the operations under way on them end. Nothing is deleted from any
// store. Run returns, and later changes fail with ErrClosed.
func (r *Registry) Close() error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	dests := r.dests
	r.dests, r.def = map[string]*Destination{}, ""
	r.mu.Unlock()
	for _, d := range dests {
		d.remove()
	}
	nudge(r.changed)
	r.memMu.Lock()
	for _, c := range r.memClose {
		c()
	}
	r.mem, r.memClose = map[string]storage.Bucket{}, nil
	r.memMu.Unlock()
	return nil
}

// check checks one destination, opening its store first if it is not
// open, and records the outcome unless ctx ended or the spec changed
// meanwhile.
func (r *Registry) check(ctx context.Context, d *Destination) Status {
	gen, spec, loc, h, removed := d.snapshot()
	if removed {
		return d.Status()
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.CheckTimeout)
	defer cancel()
	var err error
	if h == nil {
		if h, err = r.open(cctx, spec, loc); err == nil && !d.installIfCurrent(gen, h) {
			h.retire()
			return d.Status()
		}
	}
	if err == nil {
		err = h.check(cctx)
		h.release()
	}
	if ctx.Err() != nil {
		return d.Status() // shutting down: not the store's failure
	}
	r.record(d, gen, err)
	return d.Status()
}

// check lists at most one key: the cheapest request that proves the
// bucket exists and the credentials may list it.
func (h *handle) check(ctx context.Context) error {
	if h.precheck != nil {
		if err := h.precheck(); err != nil {
			return err
		}
	}
	for _, err := range h.probe.List(ctx, "") {
		return err
	}
	return nil
}

// record applies a check's outcome to d's status, unless d's spec changed
// since generation gen, and reports a transition.
func (r *Registry) record(d *Destination, gen uint64, err error) {
	d.mu.RLock()
	stale := d.gen != gen || d.removed
	d.mu.RUnlock()
	if stale {
		return
	}
	now := r.now()
	d.statusMu.Lock()
	prev := d.status
	next, changed := prev.next(err, now)
	d.status = next
	d.statusMu.Unlock()
	if !changed {
		return
	}
	if next.Available() {
		d.log.Info("destination available")
	} else {
		d.log.Warn("destination unavailable", "reason", string(next.Reason), "message", next.Message)
	}
	r.observe(Event{Kind: StatusChanged, Destination: d.name, Time: now, Status: next, Previous: prev})
}

func (r *Registry) checkInterval(d *Destination) time.Duration {
	if iv := d.Spec().CheckInterval; iv > 0 {
		return iv
	}
	return r.opts.CheckInterval
}

func (r *Registry) pollInterval(d *Destination) time.Duration {
	if iv := d.Spec().PollInterval; iv > 0 {
		return iv
	}
	return r.opts.PollInterval
}
