package destination

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Desired is the set of destinations a host wants: what Apply reconciles
// the registry to.
type Desired struct {
	// Destinations are the specs, with distinct names.
	Destinations []Spec
	// Default names the default destination, one of Destinations. Empty
	// means: the current default if it is kept; else, for a registry that
	// has none yet, the destination named DefaultName, or the only one.
	Default string
	// Force lets Apply remove or move destinations that backup configs
	// use (see Options.Users).
	Force bool
}

// Changes reports what Apply did. Names are sorted.
type Changes struct {
	Added, Updated, Removed, Unchanged []string
	// Default is the default destination after Apply; DefaultChanged says
	// whether Apply changed it.
	Default        string
	DefaultChanged bool
}

// Empty reports whether Apply changed nothing.
func (c Changes) Empty() bool {
	return len(c.Added) == 0 && len(c.Updated) == 0 && len(c.Removed) == 0 && !c.DefaultChanged
}

// checkChanges refuses removing the destination named DefaultName, and
// removing or moving destinations in use unless forced.
func checkChanges(ch Changes, current map[string]*Destination, loc func(string) Location, usersOf func(string) []string, force bool) error {
	var errs []error
	for _, name := range ch.Removed {
		if name == DefaultName {
			errs = append(errs, fmt.Errorf("%w: %s is never removed", ErrRemoveDefault, quote(name)))
		} else if err := inUseBy(usersOf, name, "remove", force); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range ch.Updated {
		if loc(name) != current[name].Location() {
			if err := inUseBy(usersOf, name, "move", force); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Apply reconciles the registry to desired in one step: it adds the
// destinations it lacks, updates those whose spec differs (a changed
// Credentials.Revision counts, and reopens the client), removes those not
// desired, and moves the default. Removing a destination forgets its
// inventory and deletes nothing from its store.
//
// Apply is all or nothing: every spec is checked first, and any problem
// fails the whole call with nothing changed. The errors are those of Add,
// Update and Remove, joined when several specs are invalid; ErrExists for
// a name given twice; ErrNoDefault when no default can be chosen;
// ErrRemoveDefault when the current default would go and desired names no
// other, or the destination named DefaultName would go; ErrInUse when a
// destination backup configs use would go or move (see Options.Users),
// unless desired.Force.
func (r *Registry) Apply(ctx context.Context, desired Desired) (Changes, error) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	return r.apply(ctx, desired, r.opts.Users)
}

// apply is Apply, with writeMu held and the users of a destination given
// by usersOf.
func (r *Registry) apply(ctx context.Context, desired Desired, usersOf func(string) []string) (Changes, error) {
	type want struct {
		spec Spec
		loc  Location
	}
	wants := map[string]want{}
	var errs []error
	for _, spec := range desired.Destinations {
		loc, err := r.validate(spec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := wants[spec.Name]; dup {
			errs = append(errs, fmt.Errorf("%w: %s is given twice", ErrExists, quote(spec.Name)))
			continue
		}
		wants[spec.Name] = want{spec, loc}
	}
	if len(errs) > 0 {
		return Changes{}, errors.Join(errs...)
	}
	locs := make(map[string]Location, len(wants))
	for name, w := range wants {
		locs[name] = w.loc
	}
	for _, name := range sortedKeys(wants) {
		if other := overlap(name, wants[name].loc, locs); other != "" {
			return Changes{}, locationInUse(name, wants[name].loc, other, locs[other])
		}
	}

	r.mu.RLock()
	closed := r.closed
	current := make(map[string]*Destination, len(r.dests))
	for name, d := range r.dests {
		current[name] = d
	}
	curDefault := r.def
	r.mu.RUnlock()
	if closed {
		return Changes{}, ErrClosed
	}

	def, err := chooseDefault(desired, curDefault, func(name string) bool { _, ok := wants[name]; return ok })
	if err != nil {
		return Changes{}, err
	}

	ch := Changes{Default: def, DefaultChanged: def != curDefault}
	for _, name := range sortedKeys(wants) {
		d, ok := current[name]
		switch {
		case !ok:
			ch.Added = append(ch.Added, name)
		case d.Spec() != wants[name].spec:
			ch.Updated = append(ch.Updated, name)
		default:
			ch.Unchanged = append(ch.Unchanged, name)
		}
	}
	for _, name := range sortedKeys(current) {
		if _, ok := wants[name]; !ok {
			ch.Removed = append(ch.Removed, name)
		}
	}
	if err := checkChanges(ch, current, func(name string) Location { return wants[name].loc }, usersOf, desired.Force); err != nil {
		return Changes{}, err
	}

	// Open the new clients before changing anything visible.
	type opened struct {
		h    *handle
		err  error
		keep bool // the spec needs no new client: keep the current one
	}
	clients := map[string]opened{}
	for _, name := range ch.Added {
		h, err := r.open(ctx, wants[name].spec, wants[name].loc)
		clients[name] = opened{h: h, err: err}
	}
	for _, name := range ch.Updated {
		d := current[name]
		old := d.Spec()
		if old.needsReopen(wants[name].spec) {
			h, err := r.open(ctx, wants[name].spec, wants[name].loc)
			clients[name] = opened{h: h, err: err}
			continue
		}
		clients[name] = opened{keep: true}
	}

	added := make([]*Destination, 0, len(ch.Added))
	r.mu.Lock()
	for _, name := range ch.Added {
		d := r.newDestination(wants[name].spec, wants[name].loc)
		d.h, d.openErr = clients[name].h, clients[name].err
		r.dests[name] = d
		added = append(added, d)
	}
	for _, name := range ch.Removed {
		delete(r.dests, name)
	}
	r.def = def
	r.mu.Unlock()

	for _, d := range added {
		d.log.Info("destination added", "location", d.loc.String(), "default", d.name == def, "readOnly", d.spec.ReadOnly)
		if d.openErr != nil {
			r.record(d, d.gen, d.openErr)
		}
	}
	for _, name := range ch.Updated {
		c := clients[name]
		if c.keep {
			current[name].respec(wants[name].spec, wants[name].loc)
		} else {
			r.install(current[name], wants[name].spec, wants[name].loc, c.h, c.err)
		}
		current[name].log.Info("destination updated", "location", wants[name].loc.String(), "readOnly", wants[name].spec.ReadOnly)
	}
	for _, name := range ch.Removed {
		current[name].remove()
		current[name].log.Info("destination removed; its objects are left in place")
	}
	if ch.DefaultChanged {
		r.log.Info("default destination changed", "from", curDefault, "to", def)
	}
	nudge(r.changed)
	return ch, nil
}

// chooseDefault picks the default of desired, given the current one.
func chooseDefault(desired Desired, current string, wanted func(string) bool) (string, error) {
	switch {
	case desired.Default != "":
		if !wanted(desired.Default) {
			return "", fmt.Errorf("%w: default %s is not among the desired destinations", ErrNoDefault, quote(desired.Default))
		}
		return desired.Default, nil
	case current != "" && wanted(current):
		return current, nil
	case current != "":
		return "", fmt.Errorf("%w: %s would be removed and no other destination is named the default", ErrRemoveDefault, quote(current))
	case len(desired.Destinations) == 0:
		return "", nil
	case wanted(DefaultName):
		return DefaultName, nil
	case len(desired.Destinations) == 1:
		return desired.Destinations[0].Name, nil
	}
	return "", fmt.Errorf("%w: name one of the %d destinations the default", ErrNoDefault, len(desired.Destinations))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
