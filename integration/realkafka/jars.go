// Package realkafka runs Apache Kafka brokers (KRaft, from Maven Central) on
// 127.0.0.1 for the real-broker tier of the integration tests and for the
// benchmark: one combined broker+controller node, or a cluster of several,
// each a JVM of its own on free ports with a data folder of its own.
//
// The jars come from Maven Central through the pom embedded here (Kafka
// Version, its tools and the log4j2 slf4j binding the published POMs leave
// out), copied once into a cache folder outside the repository
// (Jars). Nothing is downloaded from anywhere else; every listener binds
// 127.0.0.1.
package realkafka

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

//go:embed pom.xml
var pom []byte

// Version is the Apache Kafka version the tier runs: the pom's kafka.version.
var Version = PomProperty("realkafka", pom, "kafka.version")

// InstallHint is the command that installs what the tier needs (Debian).
const InstallHint = "apt-get install -y openjdk-17-jre-headless maven (.ci/run does)"

// completeMarker is written into the cache folder once every jar is in it.
const completeMarker = ".complete"

// CacheDir is the folder the jars of Version are copied to:
// ${XDG_CACHE_HOME:-$HOME/.cache}/ovstream/kafka-<Version>.
func CacheDir() (string, error) { return CacheFolder("kafka-" + Version) }

// CacheFolder is the folder name in the project's cache outside the
// repository: ${XDG_CACHE_HOME:-$HOME/.cache}/ovstream/<name>.
func CacheFolder(name string) (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("realkafka: no cache folder: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "ovstream", name), nil
}

// FillOnce makes the cache folder dir once: unless dir holds the marker
// file .complete, it calls fill with a new empty work folder beside dir,
// writes the marker (fill's summary, one line) into it and renames it to dir,
// replacing an incomplete earlier one. Two processes calling it at once take
// turns (flock on dir + ".lock"). The error is fill's, or names the
// folder operation that failed.
func FillOnce(dir string, fill func(work string) (summary string, err error)) error {
	if _, err := os.Stat(filepath.Join(dir, completeMarker)); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if _, err := os.Stat(filepath.Join(dir, completeMarker)); err == nil {
		return nil // the other process completed it meanwhile
	}
	work, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+"-download-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	summary, err := fill(work)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, completeMarker), []byte(summary+"\n"), 0o644); err != nil {
		return err
	}
	_ = os.RemoveAll(dir) // an incomplete earlier copy
	return os.Rename(work, dir)
}

// CheckTools returns an error naming the install command when java or mvn
// is not on PATH.
func CheckTools() error {
	var missing []string
	for _, p := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("realkafka: %v not on PATH: the real-broker tier needs Java 17+ and Maven: %s", missing, InstallHint)
	}
	return nil
}

// Jars returns the cache folder holding every runtime jar of the pom,
// running `mvn -q dependency:copy-dependencies -DincludeScope=runtime` into
// it first unless a previous run completed it (FillOnce). The download
// (about 90 jars, 60 MB) takes ~20-40 s the first time.
func Jars() (string, error) {
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, completeMarker)); err == nil {
		return dir, nil
	}
	if err := CheckTools(); err != nil {
		return "", err
	}
	err = FillOnce(dir, func(work string) (string, error) {
		pomPath := filepath.Join(work, "pom.xml")
		if err := os.WriteFile(pomPath, pom, 0o644); err != nil {
			return "", err
		}
		defer os.Remove(pomPath)
		began := time.Now()
		cmd := exec.Command("mvn", "-q", "-B", "-f", pomPath, "dependency:copy-dependencies",
			"-DincludeScope=runtime", "-DoutputDirectory="+work)
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("mvn dependency:copy-dependencies of Kafka %s: %v\n%s", Version, err, b)
		}
		jars, _ := filepath.Glob(filepath.Join(work, "*.jar"))
		if len(jars) == 0 {
			return "", errors.New("mvn copied no jar")
		}
		return fmt.Sprintf("%d jars of Kafka %s in %v", len(jars), Version, time.Since(began).Round(time.Second)), nil
	})
	if err != nil {
		return "", fmt.Errorf("realkafka: %w", err)
	}
	return dir, nil
}
