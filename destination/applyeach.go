package destination

import (
	"context"
	"fmt"
)

// ApplyEach reconciles the registry to desired as Apply does, but judges
// the specs one by one instead of all together: a spec Apply would refuse
// (invalid, a cloud without its driver, a name given twice, a location an
// earlier spec of desired claims, a move of a destination in use) is left
// out and its error returned under its name in refused, and the others
// are applied. A host whose users write one destination each can so
// refuse one bad destination without holding back every other change,
// rotated credentials included.
//
// A refused spec is left out of the registry as if it were not desired,
// so the same desired set gives the same registry whatever was applied
// before (a host that restarts converges to the same state), except where
// leaving it out is itself refused: the destination named DefaultName,
// and a destination in use (see Options.Users) unless desired.Force, keep
// their current spec, and refused says why. A destination not desired
// whose removal is refused stays the same way. When desired.Default is
// refused, the current default stays the default, or else the first
// destination accepted becomes it.
//
// err is what no single spec causes: ErrNoDefault, ErrRemoveDefault when
// the current default would go, ErrClosed; then nothing changed.
//
// ApplyEach decides and applies as one change: a concurrent Add, Update,
// Remove, Apply or ApplyEach happens wholly before or wholly after it, so
// a kept spec is the one the registry holds when it applies. Options.Users
// is asked once per destination, so a destination whose users change
// meanwhile is judged by one answer, never refused alone and then failing
// the whole change.
func (r *Registry) ApplyEach(ctx context.Context, desired Desired) (ch Changes, refused map[string]error, err error) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	usersOf := r.opts.Users
	if usersOf != nil {
		asked := map[string][]string{}
		usersOf = func(name string) []string {
			users, ok := asked[name]
			if !ok {
				users = r.opts.Users(name)
				asked[name] = users
			}
			return users
		}
	}
	inUse := func(name, change string) error { return inUseBy(usersOf, name, change, desired.Force) }
	refused = map[string]error{}
	current := map[string]*Destination{}
	for _, d := range r.List() {
		current[d.Name()] = d
	}
	// keep reports whether a destination the registry has must stay when
	// its new spec is refused.
	keep := func(name string) bool {
		_, ok := current[name]
		return ok && (name == DefaultName || inUse(name, "remove") != nil)
	}
	accepted := Desired{Force: desired.Force}
	locs := map[string]Location{}
	take := func(spec Spec, loc Location) {
		accepted.Destinations = append(accepted.Destinations, spec)
		locs[spec.Name] = loc
	}
	seen := map[string]bool{}
	for _, spec := range desired.Destinations {
		if seen[spec.Name] {
			refused[spec.Name] = fmt.Errorf("%w: %s is given twice", ErrExists, quote(spec.Name))
			continue
		}
		seen[spec.Name] = true
		loc, err := r.validate(spec)
		if err == nil {
			if other := overlap(spec.Name, loc, locs); other != "" {
				err = locationInUse(spec.Name, loc, other, locs[other])
			}
		}
		if cur, ok := current[spec.Name]; ok && err == nil && cur.Location() != loc {
			err = inUse(spec.Name, "move")
		}
		if err == nil {
			take(spec, loc)
			continue
		}
		refused[spec.Name] = err
		if cur := current[spec.Name]; keep(spec.Name) && overlap(spec.Name, cur.Location(), locs) == "" {
			take(cur.Spec(), cur.Location())
		}
	}
	for name, cur := range current {
		if seen[name] || !keep(name) {
			continue
		}
		if name == DefaultName {
			refused[name] = fmt.Errorf("%w: %s is never removed", ErrRemoveDefault, quote(name))
		} else {
			refused[name] = inUse(name, "remove")
		}
		if overlap(name, cur.Location(), locs) == "" {
			take(cur.Spec(), cur.Location())
		}
	}
	def, _ := r.Default()
	switch _, ok := locs[desired.Default]; {
	case ok:
		accepted.Default = desired.Default
	case def != nil && locs[def.Name()] != Location{}:
		accepted.Default = def.Name()
	case len(accepted.Destinations) > 0:
		accepted.Default = accepted.Destinations[0].Name
	}
	ch, err = r.apply(ctx, accepted, usersOf)
	return ch, refused, err
}
