// Package controller reconciles the backup.etcdbackup.io resources with
// the etcdbackup library, inside a host's controller-runtime manager:
//
//	BackupDestination  -> destination.Registry.ApplyEach, status from its checks and inventory
//	EtcdBackupConfig   -> schedule.Scheduler.Set and Remove, status from the job's runs
//	EtcdBackup         -> one backup.Pipeline run
//	EtcdRestore        -> restore.Restorer.Restore of a member's data directory
//	EtcdCluster        -> under deletionPolicy Delete, a finalizer that deletes the
//	                      cluster's backups after a grace period (retention.Teardown)
//
// Credentials come from Secrets of the controller's namespace only, through
// the manager's client, and a changed Secret reaches the registry without a
// restart. Nothing that reads the registry acts before the destinations
// controller applied the BackupDestinations once. The library's events
// become Kubernetes Events, its collectors join the manager's metrics
// registry, and the scheduler runs on the elected leader only. Setup wires
// it all into a manager.
package controller
