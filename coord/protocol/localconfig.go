package protocol

import (
	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
)

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
	return localConfig{cfg: cfg, fields: layout.ConfigFields(cfg)}, nil
}
