// Package schedule runs backup jobs on cron schedules, for many clusters,
// inside a host such as a Kubernetes controller-manager.
//
// The host reconciles its desired jobs into a Scheduler: Set adds or
// updates a Job (an unchanged one is a no-op, a changed Schedule or
// TimeZone reschedules it), Remove removes one, List and Get report each
// job's Status. Start runs the scheduler until its context ends, and
// NeedLeaderElection returns true, so a controller-manager adds it as a
// runnable of its elected leader without this package importing
// controller-runtime.
//
// # Schedules
//
// Job.Schedule is parsed by robfig/cron/v3: five fields, an optional
// leading seconds field, or a descriptor (@daily, @hourly, @every 6h).
// It is read in Job.TimeZone (an IANA name; empty means UTC). An empty
// schedule is a one-shot job: one backup as soon as the scheduler runs,
// and never again (Set again, even changed, does not repeat it; Remove and
// Set do). An invalid expression or zone is refused by Set with a
// *ScheduleError.
//
// Daylight saving: a schedule whose hour field is * (@hourly, "0 * * * *")
// follows real time, an hour apart through both changes. A schedule with
// a fixed hour names times of day and runs each once: in Europe/Berlin,
// "30 2 * * *" runs at 03:00 on the night 02:30 does not exist (the end
// of the skipped hour), and only at the first 02:30 on the night it comes
// twice. @every intervals are real time, counted from the Unix epoch:
// @every 1h ticks at every full hour UTC, @every 90m at 00:00, 01:30, ...
// UTC, whenever the process started.
//
// # Runs
//
// A Runner does the work: Backup, then, after each successful backup of a
// scheduled job, Prune with the job's retention policy. PipelineRunner
// wires backup.Pipeline and retention.Pruner to the host's clusters and
// destinations through three functions, so a host plugs in its registry.
//
// A job takes etcd snapshots by default; a job of Kind backup.KindKeysJSON
// (or backup.KindKeys, the same keys as a zip) takes logical backups of
// the keys under its Prefixes instead, and its retention counts them apart
// from the snapshots and from the other logical kind.
//
// A job with Replicate set is a replication job: each run copies the
// cluster's backups created within Replicate.Window from the destination
// Replicate.From to the job's Destinations, as stored (replicate.Copier:
// verified, resumable, chains whole, no key needed), and its retention
// prunes the copies there, of every backup name, and only copies: a
// backup another job or a fanned-out run wrote to a target is never its
// to delete; with Replicate.Name, only the copies of that backup name
// (one config's, each replicated by its own job). Its retention counts
// snapshots, keys-json and keys backups apart (replicate.Kinds), and
// checks a copy's dates against when the source's store wrote it, which
// the copy records, however long after its backup the copy was written
// (retention.PlanOptions.Copies). Replicate.PointInTime prunes
// the copied chains by the rule of continuous backups
// (retention.PointInTime), the copies alone; without it a copied chain is
// kept while its full backup is, or while it reaches past the oldest full
// backup kept (a follower's live chain), and deleted whole after
// (replicate.ChainRule). A scheduled run copies only what that retention
// keeps, so nothing it pruned is copied back. A run that finds the
// targets in step copies nothing. PipelineRunner.ReplicationMetrics
// records each copy's lag and the backups the target lacks, and a run
// that fails before it can tell (a dead source, or a run out of time) as
// a failure whose lag grows from the last report, kept in memory only
// (after a restart the lag is set again by the first report); a run
// stopped otherwise (the scheduler stopping) is no failure.
//
// # Continuous backup
//
// A scheduled job with Continuous set also backs its cluster up between
// its full backups: while the job is set and the scheduler runs, a
// ContinuousRunner (PipelineRunner is one) runs a backup.Follower for it,
// whose chains start from the job's full backups, and Prune keeps what
// restores to any point of Continuous.Window need. Its start (finding
// where to resume, or taking the first full backup) waits for a run slot
// like a backup run; once it follows etcd it frees the slot. With a Lock,
// it holds the lock FollowLockID(job.ID) for as long as it runs, so one
// replica follows a cluster at a time and another takes over when it
// stops. When the follower ends with an error, it starts again after a
// pause (Status.FollowError, Status.FollowRestarts); Status.Following
// says whether it follows etcd now.
//
// With Continuous.CompactInterval, the runner (a CompactingRunner:
// PipelineRunner is one) also compacts the job's chain into a synthetic
// full backup that often, on the scheduler's clock (package compact): each
// compaction waits for a run slot and takes the job's lock as a run does,
// and one that finds no new segment stores nothing (Status.Compactions,
// Status.CompactError; one skipped because a run holds the lock keeps the
// last error). Only the replica whose follower runs compacts, and the
// next compaction is due an interval after the newest synthetic full
// backup on the job's destinations (CompactingRunner.LastCompaction), so
// neither a standby replica nor a restart changes the rhythm.
//
// At most Config.MaxConcurrent runs are in flight, and at most
// Config.MaxPerDestination write to one destination; due runs wait in
// order, and a run whose destination is busy lets others pass. A job never
// overlaps itself: a tick due while its previous run is in flight or
// waiting is skipped and counted (SkipOverlap). Config.MaxJitter delays
// each job by a fixed amount derived from its ID, so that hundreds of
// @hourly jobs do not start in the same second. Ticks missed while the
// process was paused collapse into one run.
//
// With a Config.Inventory, Start asks when each job last backed up (from
// its destinations, not from memory): a job that missed a tick since, or
// never backed up, runs once right away, and a one-shot job already backed
// up does not run again.
//
// Remove cancels the job's run in flight (the upload aborts, nothing
// half-visible remains) and its continuous backup (which stores what it
// holds), and waits for them to return; after it, nothing of the job
// runs, so the host may delete the cluster's backups. A Remove whose
// context ends first returns its error; calling it again waits again. When Start's
// context ends, the scheduler starts nothing new and returns within
// Config.StopTimeout, the whole budget of a stop: runs in flight may finish
// during three quarters of it, then they are cancelled and clean up in the
// rest; continuous backups store their last segment within it; what has
// not ended then is abandoned as a killed process would leave it, with
// nothing uncommitted visible (see Scheduler.Start). A continuous backup
// abandoned so stays the job's: Remove waits for it, and the next Start
// starts the job's continuous backup only once it has returned. A
// continuous backup whose lock is lost, also while it stores its last
// segment, publishes nothing more (another replica may follow the cluster
// now), but still aborts its own uploads and removes its temporary files.
//
// # Replicas
//
// With a Config.Lock such as EtcdLock, each run takes the job's lock in
// etcd, so two replicas never run a job at once, and the lock records the
// last completed tick, so a replica that comes to a tick after the other
// completed it skips it (SkipDone) instead of running it twice.
//
// "One run per tick across replicas" rests on every replica computing the
// same ticks, and means, for each kind of schedule:
//
//   - A cron expression: its ticks are instants of its time zone, the same
//     in every replica. Each tick completes at most once: the replica that
//     takes the lock first runs it, the other skips it (SkipLocked while it
//     runs, SkipDone once it completed). A run that failed or timed out
//     does not complete its tick, and the other replica, coming to it
//     later (its jitter is the same, but its clock and loop are not), may
//     run it again.
//   - @every: its ticks are whole multiples of the interval since the Unix
//     epoch, not counted from a process's start, so the same holds.
//   - A one-shot job (empty Schedule) has no tick: the lock keeps two
//     replicas from running it at once, but only an Inventory (a backup of
//     it exists) keeps a second replica, or a restart, from running it
//     again.
//
// Across a restart (or a leader change that moves the scheduler to
// another replica) a tick is not lost to the jitter: when a scheduler
// starts, a tick whose jittered start (tick + the job's jitter) has not
// come yet is still due and runs at that start; the lock's record skips it
// if the previous process completed it. A tick whose jittered start passed
// while no scheduler ran is made up only with an Inventory (catch-up, one
// run however many ticks were missed).
//
// # Status and metrics
//
// Status holds the next run, whether a run is in flight, the last run,
// success, error and duration, consecutive failures, skipped runs and
// retention failures. Scheduler.Collector exposes the same as Prometheus
// series labelled by job and cluster.
//
// Time comes from a Clock (SystemClock by default): tests substitute a
// manual one and move it, instead of sleeping through real minutes.
package schedule
