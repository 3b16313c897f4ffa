package backup

import (
	"time"
)

// EventKind says what happened in a backup.
type EventKind string

// The events of one backup, in the order they happen. Progress repeats;
// Uploaded comes once per destination that stored the backup; the backup
// ends with Completed (every destination stored it) or Failed (at least one
// did not; Event.Err says why, and Uploaded events say which succeeded).
const (
	Started   EventKind = "Started"
	Progress  EventKind = "Progress"
	Uploaded  EventKind = "Uploaded"
	Completed EventKind = "Completed"
	Failed    EventKind = "Failed"
)

// Event is one step of a backup, as reported to an Observer. Its fields are
// safe to show to users: they never hold credentials.
type Event struct {
	Kind    EventKind
	Time    time.Time
	ID      string // backup ID
	Cluster string
	// Job is the identity the host gave the run (Request.Job): its backup
	// config or job, such as the namespace and name of a Kubernetes
	// object. Empty when it gave none.
	Job string
	// Destination is set on Uploaded, and on Failed when one destination
	// failed.
	Destination string
	// Destinations are the run's destinations, on Started.
	Destinations []string
	// RawBytes is how much of the snapshot has been read so far (Progress),
	// or its size (Uploaded, Completed).
	RawBytes int64
	// ExpectedBytes is the size the snapshot is expected to have, from
	// the member's status (its database size) once the snapshot is open;
	// zero when unknown. A progress display divides RawBytes by it.
	ExpectedBytes int64
	// StoredBytes is how many encoded bytes were produced so far, or the
	// size of the stored object.
	StoredBytes int64
	// Rate is the snapshot read rate in bytes per second since Started.
	Rate float64
	// Elapsed is the time since Started.
	Elapsed time.Duration
	// Err is set on Failed.
	Err error
	// Manifest is set on Uploaded: the committed manifest.
	Manifest *Manifest
}

// Observer receives the events of backups. Observe is called synchronously
// from the backup's goroutines and must return quickly; it may be called
// concurrently for events of different destinations.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Observers fans events out to several observers, in order.
type Observers []Observer

// Observe implements Observer.
func (os Observers) Observe(e Event) {
	for _, o := range os {
		if o != nil {
			o.Observe(e)
		}
	}
}
