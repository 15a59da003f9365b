package clickhouse

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAnalystUsersXML checks the users.d file: well-formed XML with a
// readonly profile, the SHA-256 of the password (FIPS 180-2 test vector
// "abc") and never the password, allow_databases, and the refusals.
func TestAnalystUsersXML(t *testing.T) {
	dir := t.TempDir()
	path, err := WriteAnalystUser(filepath.Join(dir, "users.d"), AnalystUser{Name: "analyst", Password: "abc", Database: "crowdlog_analyst"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Profiles struct {
			Readonly struct {
				Readonly string `xml:"readonly"`
			} `xml:"readonly"`
		} `xml:"profiles"`
		Users struct {
			Analyst struct {
				SHA      string   `xml:"password_sha256_hex"`
				IPs      []string `xml:"networks>ip"`
				Profile  string   `xml:"profile"`
				Quota    string   `xml:"quota"`
				Database []string `xml:"allow_databases>database"`
			} `xml:"analyst"`
		} `xml:"users"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	u := doc.Users.Analyst
	if doc.Profiles.Readonly.Readonly != "1" || u.Profile != "readonly" || u.Quota != "default" ||
		u.SHA != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" ||
		strings.Join(u.IPs, ",") != "127.0.0.1,::1" || strings.Join(u.Database, ",") != "crowdlog_analyst" {
		t.Errorf("users.d file:\n%s", data)
	}
	if strings.Contains(string(data), ">abc<") {
		t.Errorf("users.d file holds the password")
	}
	if filepath.Base(path) != AnalystFile {
		t.Errorf("path %s", path)
	}
	for _, bad := range []AnalystUser{
		{Name: "a-b", Password: "p", Database: "d"},
		{Name: "default", Password: "p", Database: "d"},
		{Name: "a", Password: "p", Database: "d</database>"},
		{Name: "a", Database: "d"},
		{Name: "a", Password: "p", Database: "d", Networks: []string{"10.0.0.0/8</ip>"}},
	} {
		if _, err := AnalystUsersXML(bad); err == nil {
			t.Errorf("AnalystUsersXML(%+v) accepted", bad)
		}
	}
	if got, err := AnalystUsersXML(AnalystUser{Name: "a", Password: "p", Database: "d", Networks: []string{"10.0.0.0/8", "::/0"}}); err != nil ||
		!strings.Contains(got, "<ip>10.0.0.0/8</ip>") || !strings.Contains(got, "<ip>::/0</ip>") || strings.Contains(got, "127.0.0.1") {
		t.Errorf("networks: %v\n%s", err, got)
	}
}

func TestReadAddrEnv(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadAddrEnv(dir); err == nil {
		t.Error("ReadAddrEnv without addr.env succeeded")
	}
	s := &Server{TCPAddr: "127.0.0.1:9123", HTTPAddr: "127.0.0.1:8123"}
	if _, err := s.WriteAddrEnv(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadAddrEnv(dir); err != nil || got != "127.0.0.1:9123" {
		t.Errorf("ReadAddrEnv = %q, %v", got, err)
	}
}

// TestWriterUsersXML: the writer's users.d file names its databases and
// the SHA-256 of its password, never the password; bad input is refused.
func TestWriterUsersXML(t *testing.T) {
	text, err := WriterUsersXML(WriterUser{Name: "crowdlog_writer", Password: "pw-73", Databases: []string{"crowdlog", "crowdlog_analyst"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<database>crowdlog</database>", "<database>crowdlog_analyst</database>", "<readonly>0</readonly>",
		"<profile>" + WriterProfile + "</profile>", "<ip>127.0.0.1</ip>", "<password_sha256_hex>"} {
		if !strings.Contains(text, want) {
			t.Errorf("writer users.d lacks %s:\n%s", want, text)
		}
	}
	if strings.Contains(text, "pw-73") {
		t.Error("the writer's users.d file holds the password")
	}
	for _, u := range []WriterUser{
		{Name: "default", Password: "p", Databases: []string{"d"}},
		{Name: "bad name", Password: "p", Databases: []string{"d"}},
		{Name: "w", Databases: []string{"d"}},
		{Name: "w", Password: "p"},
		{Name: "w", Password: "p", Databases: []string{"d;x"}},
		{Name: "w", Password: "p", Databases: []string{"d"}, Networks: []string{"0.0.0.0/0</ip><ip>"}},
	} {
		if _, err := WriterUsersXML(u); err == nil {
			t.Errorf("%+v: accepted", u)
		}
	}
}
