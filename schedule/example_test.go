package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule"
	"github.com/etcdbackup/etcdbackup/schedule/scheduletest"
)

// A nightly backup at 02:30 Berlin time, run on a manual clock across the
// night the clocks go forward: 02:30 does not exist that night, and the
// backup runs at 03:00, when the skipped hour ends. Retention follows the
// successful backup.
func Example() {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	clock := scheduletest.NewClock(time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC))
	events := make(chan string, 2)
	s, err := schedule.New(schedule.Config{
		Clock: clock,
		Runner: schedule.RunnerFuncs{
			BackupFunc: func(ctx context.Context, job schedule.Job, tick time.Time) error {
				events <- fmt.Sprintf("backup %s-%s at %s", job.Cluster, job.Name, clock.Now().In(berlin).Format("Jan 2 15:04 MST"))
				return nil
			},
			PruneFunc: func(ctx context.Context, job schedule.Job) error {
				events <- fmt.Sprintf("prune %s: %s", job.Cluster, job.Retention)
				return nil
			},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = s.Set(schedule.Job{
		ID:           "kube-system/prod-a",
		Schedule:     "30 2 * * *",
		TimeZone:     "Europe/Berlin",
		Cluster:      "prod-a",
		Name:         "nightly",
		Destinations: []string{"s3-eu"},
		Retention:    retention.KeepLast(7),
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- s.Start(ctx) }()
	_ = clock.BlockUntil(ctx, 1) // the scheduler waits for its first run

	st, _ := s.Get("kube-system/prod-a")
	fmt.Println("next run:", st.NextRun.In(berlin).Format("Jan 2 15:04 MST"))
	clock.Set(st.NextRun)
	fmt.Println(<-events)
	fmt.Println(<-events)

	cancel() // Start returns once the run in flight has ended
	fmt.Println("stopped:", <-stopped)
	st, _ = s.Get("kube-system/prod-a")
	fmt.Printf("successes: %d, next run: %s\n", st.Successes, st.NextRun.In(berlin).Format("Jan 2 15:04 MST"))
	// Output:
	// next run: Mar 29 03:00 CEST
	// backup prod-a-nightly at Mar 29 03:00 CEST
	// prune prod-a: keep-last=7
	// stopped: <nil>
	// successes: 1, next run: Mar 30 02:30 CEST
}

var _ schedule.Clock = (*scheduletest.Clock)(nil)

// Set refuses a job whose schedule cannot be parsed, with a typed error.
func ExampleScheduler_Set_invalid() {
	s, _ := schedule.New(schedule.Config{Runner: schedule.RunnerFuncs{}})
	err := s.Set(schedule.Job{ID: "prod-a", Schedule: "0 25 * * *", Cluster: "prod-a", Name: "nightly", Destinations: []string{"s3"}})
	var se *schedule.ScheduleError
	fmt.Println(errors.Is(err, schedule.ErrInvalidSchedule), errors.As(err, &se) && se.Field == schedule.FieldSchedule)
	fmt.Println(err)
	// Output:
	// true true
	// invalid job "prod-a": invalid schedule "0 25 * * *": end of range (25) above maximum (23): 25
}
