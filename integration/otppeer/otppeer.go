// Package otppeer reads the files of `ovstream export otp-empirical-delay`
// with OpenTripPlanner's own reader: Main.java runs OTP 2.9's
// EmpiricalDelayCsvDataReader (the class its graph build uses) on a zip file
// or directory and prints what it kept and every issue it recorded (Read).
//
// The jar comes from Maven Central through the pom embedded here
// (org.opentripplanner:otp-shaded, Version), copied once with Main.java
// compiled by javac into a cache folder outside the repository
// (Classpath). Nothing is downloaded from anywhere else. OTP 2.9 is built
// for Java 25: JavaHome finds it.
package otppeer

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
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

// JavaHome returns the Java 25 or later that runs OTP: $OTP_JAVA_HOME, else
// /usr/lib/jvm/temurin-25-jdk-amd64; an error naming both when neither has
// bin/javac.
func JavaHome() (string, error) {
	for _, home := range []string{os.Getenv("OTP_JAVA_HOME"), "/usr/lib/jvm/temurin-25-jdk-amd64"} {
		if home == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(home, "bin", "javac")); err == nil {
			return home, nil
		}
	}
	return "", errors.New("otppeer: OpenTripPlanner " + Version + " needs Java 25: set OTP_JAVA_HOME, or install it in /usr/lib/jvm/temurin-25-jdk-amd64")
}

// Classpath returns the JVM class path of the peer (the compiled Main, then
// the OTP jar), making the cache folder
// ${XDG_CACHE_HOME:-$HOME/.cache}/ovstream/otp-<Version>-<12 hex digits of
// the SHA-256 of pom.xml and Main.java> first unless a previous call
// completed it (realkafka.FillOnce): `mvn -q dependency:copy` of
// org.opentripplanner:otp-shaded (one jar holding its dependencies), then
// javac.
func Classpath(javaHome string) (string, error) {
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
		_, err := realkafka.BuildJavaPeer(work, filepath.Join(javaHome, "bin", "javac"), "OTP "+Version, pom, mainJava, func(jarsDir string) []string {
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
	home, err := JavaHome()
	if err != nil {
		return nil, err
	}
	cp, err := Classpath(home)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(home, "bin", "java"), "-cp", cp, "Main", path, first, strconv.Itoa(days))
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
