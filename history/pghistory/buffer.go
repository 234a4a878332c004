package pghistory

import (
	"context"
	"fmt"

	"github.com/shardflow/shardflow/history"
)

// NewBuffer is the usual setup in one call: a Store for cfg, its table
// migrated, and a started history.Buffer writing to it (buf's Writer is
// set to the Store). Hand the Buffer to dataflow.NodeConfig.History and
// Stop it after the Node. It returns the Store too, to read history back.
func NewBuffer(ctx context.Context, cfg Config, buf history.BufferConfig) (*history.Buffer, *Store, error) {
	st, err := New(cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	buf.Writer = st
	if buf.Logger == nil {
		buf.Logger = cfg.Logger
	}
	b, err := history.NewBuffer(buf)
	if err != nil {
		return nil, nil, fmt.Errorf("pghistory: %w", err)
	}
	if err := b.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("pghistory: %w", err)
	}
	return b, st, nil
}
