//go:build race

package main

// raceDetector says whether the test binary runs under the race detector.
const raceDetector = true
