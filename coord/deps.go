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

// localConfig is a joining process's config, its defaults filled in,
// validated and encoded once per Join (prepareLocal): every attempt of the
// join writes fields as they are, and a join whose config is the one stored
// runs on cfg itself, never decoding what it wrote.
type localConfig struct {
	cfg    jobconfig.Config
	fields map[string]string
}

// prepareLocal fills the defaults of a joining process's config, validates
// it and encodes it.
func prepareLocal(cfg jobconfig.Config) (localConfig, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return localConfig{}, err
	}
	return localConfig{cfg: cfg, fields: configFields(cfg)}, nil
}
