package coord

import (
	"github.com/shardflow/shardflow/coord/jobconfig"
)

// The jobconfig functions coord relies on, in one place.

// configFields encodes cfg as the config node's children (jobType included).
func configFields(cfg jobconfig.Config) map[string]string { return cfg.Fields() }

// configFromFields decodes the config node's children of job, fills in the
// defaults and validates the result.
func configFromFields(job string, fields map[string]string) (jobconfig.Config, error) {
	cfg, err := jobconfig.FromFields(job, fields)
	if err != nil {
		return jobconfig.Config{}, err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return jobconfig.Config{}, err
	}
	return cfg, nil
}

// configPrepare fills defaults and validates a local config.
func configPrepare(cfg jobconfig.Config) (jobconfig.Config, error) {
	cfg = cfg.WithDefaults()
	return cfg, cfg.Validate()
}
