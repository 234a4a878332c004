package store

import "testing"

func TestWatchKindsFireOnZooKeepersTable(t *testing.T) {
	events := []EventType{EventNodeCreated, EventNodeDataChanged, EventNodeChildrenChanged, EventNodeDeleted, EventNotWatching}
	want := map[WatchKind][]bool{ // in the order of events
		WatchData:  {false, true, false, true, false},
		WatchExist: {true, true, false, true, false},
		WatchChild: {false, false, true, true, false},
	}
	for kind, fires := range want {
		for i, ev := range events {
			if got := kind.Fires(ev); got != fires[i] {
				t.Errorf("kind %d on %v: fires %v, want %v", kind, ev, got, fires[i])
			}
		}
	}
}

func TestChanWatchDeliversOneEventWithoutBlocking(t *testing.T) {
	ch, fire := ChanWatch()
	fire(Event{Type: EventNodeDeleted, Path: "/a"})
	fire(Event{Type: EventNodeCreated, Path: "/a"}) // a second fire: dropped, never blocks
	if ev := <-ch; ev.Type != EventNodeDeleted || ev.Path != "/a" {
		t.Fatalf("event %v %s, want the first: deleted /a", ev.Type, ev.Path)
	}
	select {
	case ev := <-ch:
		t.Fatalf("a second event %v was delivered", ev.Type)
	default:
	}
}
