package restore

import "time"

// EventKind says what happened in a fetch or restore.
type EventKind string

// The events of one fetch or restore, in the order they happen. Progress
// repeats while the object downloads; Restored comes once per member data
// directory; a failed operation ends with Failed.
const (
	// Started: the operation began.
	Started EventKind = "Started"
	// Progress: bytes were downloaded and written.
	Progress EventKind = "Progress"
	// Fetched: the snapshot was downloaded and every check passed.
	Fetched EventKind = "Fetched"
	// Restored: a member's data directory is in place.
	Restored EventKind = "Restored"
	// Failed: the operation ended with Event.Err.
	Failed EventKind = "Failed"
)

// Event is one step of a fetch or restore, as reported to an Observer. Its
// fields never hold key material.
type Event struct {
	Kind EventKind
	Time time.Time
	// Source, Cluster, ID and Key name the backup: the source's name, the
	// cluster, the backup ID (a legacy object's file name) and the data
	// object's key.
	Source, Cluster, ID, Key string
	// Job is the identity the host gave the operation (Restorer.Job).
	Job string
	// StoredBytes is how much of the stored object has been downloaded;
	// StoredSize the object's size as listed (zero when unknown).
	StoredBytes, StoredSize int64
	// RawBytes is how much of the decoded snapshot has been written.
	RawBytes int64
	// Rate is the download rate in stored bytes per second since Started.
	Rate float64
	// Elapsed is the time since Started.
	Elapsed time.Duration
	// Path is the snapshot file (Fetched) or the data directory (Restored).
	Path string
	// Member is the member whose data directory was restored (Restored).
	Member string
	// Err is set on Failed.
	Err error
}

// Observer receives events. Observe is called synchronously from the
// goroutine doing the work and must return quickly.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }
