// Package scheduletest helps a host test the code that drives a
// schedule.Scheduler without waiting for real time: Clock is a manual
// clock to give schedule.Config.Clock. A test starts the scheduler, waits
// with BlockUntil for it to wait for its next run, and moves the clock
// there with Set; the run happens then, with no sleep and no real minute
// passing.
//
// The backups themselves are faked with package backup/backuptest.
package scheduletest
