package layout

import (
	"errors"
	"fmt"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

// The jobconfig functions coord relies on, in one place.

// errBadConfig: the config stored for a job cannot be decoded or is invalid.
var ErrBadConfig = errors.New("coord: stored job config is invalid; fix it with `shardflow config set`")

// configFields encodes cfg as the config node's children (jobType included).
func ConfigFields(cfg jobconfig.Config) map[string]string { return cfg.Fields() }

// configFromFields decodes the config node's children of job, fills in the
// defaults and validates the result.
func ConfigFromFields(job string, fields map[string]string) (jobconfig.Config, error) {
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

// writeConfigNode is the operation every transaction writing config fields
// includes: it sets the config node, the one node of the config that
// servers watch (docs/zookeeper-layout.md), bumping its data version, to a
// copy of all the fields the transaction leaves (nil: none, empty data;
// servers then read the field nodes). version is the config node's version
// when the fields were read, so a copy never drops a concurrent writer's
// edit; AnyVersion when the transaction writes every field of its copy (or
// creates the node).
func WriteConfigNode(p JobPaths, fields map[string]string, version int32) store.Op {
	var data []byte
	if fields != nil {
		data = FormatConfigCopy(fields)
	}
	return &store.SetOp{Path: p.Abs(NConfig), Data: data, Version: version}
}

// decodeStoredConfig decodes the stored fields of job name; errors wrap
// ErrBadConfig and name the node.
func DecodeStoredConfig(p JobPaths, name string, fields map[string]string) (jobconfig.Config, error) {
	cfg, err := ConfigFromFields(name, fields)
	if err != nil {
		node := p.Abs(NConfig)
		if fes := jobconfig.FieldErrors(err); len(fes) > 0 {
			node = p.Config(fes[0].Field)
		}
		return jobconfig.Config{}, fmt.Errorf("%w: %s: %w", ErrBadConfig, node, err)
	}
	return cfg, nil
}
