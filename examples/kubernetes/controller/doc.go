// Package controller reconciles the backup.etcdbackup.io resources with
// the etcdbackup library, inside a host's controller-runtime manager:
//
//	BackupDestination  -> destination.Registry.Apply, status from its checks and inventory
//	EtcdBackupConfig   -> schedule.Scheduler.Set and Remove, status from the job's runs
//	EtcdBackup         -> one backup.Pipeline run
//	EtcdRestore        -> restore.Restorer.Restore of a member's data directory
//	EtcdCluster        -> a finalizer that deletes the cluster's backups (retention.Teardown)
//
// Credentials come from Secrets through the manager's client, and a changed
// Secret reaches the registry without a restart. The library's events
// become Kubernetes Events, its collectors join the manager's metrics
// registry, and the scheduler runs on the elected leader only. Setup wires
// it all into a manager.
package controller
