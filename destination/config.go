package destination

import (
	"fmt"

	"github.com/etcdbackup/etcdbackup/backup"
)

// BackupConfig is a backup configuration as a host keeps it (seed 000's
// EtcdBackupConfig): which cluster to back up, how often, how many to
// keep, and where.
type BackupConfig struct {
	// Name is the backup's name, part of every backup ID.
	Name string
	// Cluster names the cluster whose etcd is backed up.
	Cluster string
	// Destination names the destination. Empty means the registry's
	// default, as for configurations written before destinations existed;
	// ValidateBackupConfig fills it in.
	Destination string
	// Schedule is a cron expression, passed through unparsed (the
	// scheduler checks it). Empty means one backup, at once.
	Schedule string
	// Keep is how many backups to keep. Zero means the retention's
	// default.
	Keep int
}

// ValidateBackupConfig checks cfg against the registry and returns it with
// its destination filled in: the names must be valid
// (backup.ErrInvalidName), the destination must exist (ErrNotFound) and be
// writable (ErrReadOnly), Keep may not be negative. existing, when not nil,
// is the configuration cfg replaces: its destination may not change
// (ErrDestinationChanged), since its backups live there; delete the config
// and create a new one instead. An existing config without a destination
// was using the default, so filling in the current default is no change.
// Every error also matches ErrInvalidBackupConfig.
func (r *Registry) ValidateBackupConfig(cfg BackupConfig, existing *BackupConfig) (BackupConfig, error) {
	invalid := func(err error) error { return fmt.Errorf("%w: %w", ErrInvalidBackupConfig, err) }
	if err := backup.ValidateName("backup", cfg.Name); err != nil {
		return BackupConfig{}, invalid(err)
	}
	if err := backup.ValidateName("cluster", cfg.Cluster); err != nil {
		return BackupConfig{}, invalid(err)
	}
	if cfg.Keep < 0 {
		return BackupConfig{}, invalid(fmt.Errorf("keep %d is negative", cfg.Keep))
	}
	if cfg.Destination == "" {
		def, err := r.Default()
		if err != nil {
			return BackupConfig{}, invalid(fmt.Errorf("no destination given: %w", err))
		}
		cfg.Destination = def.Name()
	}
	d, err := r.Get(cfg.Destination)
	if err != nil {
		return BackupConfig{}, invalid(err)
	}
	if d.ReadOnly() {
		return BackupConfig{}, invalid(fmt.Errorf("backups of %s: %w: %s", quote(cfg.Name), ErrReadOnly, quote(d.Name())))
	}
	if existing != nil {
		was := existing.Destination
		if was == "" {
			if def, err := r.Default(); err == nil {
				was = def.Name()
			}
		}
		if was != cfg.Destination {
			return BackupConfig{}, invalid(fmt.Errorf("%w: %s goes to %s, not %s; delete it and create a new one",
				ErrDestinationChanged, quote(cfg.Name), quote(was), quote(cfg.Destination)))
		}
	}
	return cfg, nil
}
