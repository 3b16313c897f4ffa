package destination

import "time"

// EventKind says what happened to a destination.
type EventKind string

// The kinds of events.
const (
	// StatusChanged: an availability check changed the destination's
	// State or Reason.
	StatusChanged EventKind = "StatusChanged"
	// InventoryChanged: an inventory sync found entries added or removed.
	InventoryChanged EventKind = "InventoryChanged"
)

// Event is a change of one destination, as reported to an Observer. Its
// fields never hold a credential.
type Event struct {
	Kind        EventKind
	Destination string
	Time        time.Time
	// Status and Previous are the new and the former status
	// (StatusChanged).
	Status, Previous Status
	// Added and Removed are the inventory's changes (InventoryChanged).
	Added, Removed []Entry
}

// Observer receives the events of a registry's destinations. Observe is
// called synchronously from the checking and syncing goroutines, never
// with a lock held, and must return quickly; it may be called
// concurrently for different destinations.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }
