package quartz

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// quartzJars are where Debian's libquartz2-java (installed by
// scripts/setup.sh) puts Quartz.
var quartzJars = []string{"/usr/share/java/quartz2.jar", "/usr/share/java/quartz2-2.3.2.jar"}

// oracle runs testdata/QuartzOracle.java, compiled into a temporary
// directory, on a batch of requests (one JVM for the whole batch) and
// returns its answers by request id.
func oracle(t *testing.T, requests []string) map[string][]string {
	t.Helper()
	java, errJava := exec.LookPath("java")
	javac, errJavac := exec.LookPath("javac")
	jar := ""
	for _, j := range quartzJars {
		if _, err := os.Stat(j); err == nil {
			jar = j
			break
		}
	}
	if errJava != nil || errJavac != nil || jar == "" {
		msg := fmt.Sprintf("java (%v), javac (%v) and Quartz (one of %v) are needed: run scripts/setup.sh (it installs libquartz2-java)", errJava, errJavac, quartzJars)
		if os.Getenv("SHARDFLOW_REQUIRE_DOCKER") != "" {
			t.Fatal(msg)
		}
		t.Skip("skipping the comparison with Quartz: " + msg)
	}
	dir := t.TempDir()
	src, err := filepath.Abs("testdata/QuartzOracle.java")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(javac, "-nowarn", "-cp", jar, "-d", dir, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	cmd := exec.Command(java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Duser.timezone=UTC", "-cp", dir+string(os.PathListSeparator)+jar, "QuartzOracle")
	cmd.Stdin = strings.NewReader(strings.Join(requests, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("QuartzOracle: %v\n%s", err, stderr.String())
	}
	answers := make(map[string][]string, len(requests))
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		answers[f[0]] = f[1:]
	}
	if len(answers) != len(requests) {
		t.Fatalf("QuartzOracle answered %d of %d requests\n%s", len(answers), len(requests), stderr.String())
	}
	return answers
}
