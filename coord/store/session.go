package store

import "context"

// AwaitSession follows s.Session() until ok holds for the current session
// and returns it, or returns ctx.Err() with the last session seen when ctx
// ends first. It never misses a change: Session's channel closes on every
// change, and the session is re-read after each.
func AwaitSession(ctx context.Context, s Store, ok func(Session) bool) (Session, error) {
	for {
		cur, changed := s.Session()
		if ok(cur) {
			return cur, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return cur, ctx.Err()
		}
	}
}
