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
	// firstJoin: the first attempt of the first Join of this job name on
	// its Registry. No Job of this Registry ever stood in the job's
	// election, so the session holds no candidate of this server there
	// (an earlier Registry on the same session that did not resign is not
	// supported: it would stand twice), and the join's read of the latch
	// is one listing (recipe.Election.Listing), not a read of every
	// candidate (Standing).
	firstJoin bool
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
