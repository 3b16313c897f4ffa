package destination_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/etcdbackup/etcdbackup/destination"
)

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"s3://AKIA:secret@bkt/p?endpoint=h:9&insecure=true": "s3://bkt/p",
		"s3://bkt/p?secretKey=secret":                       "s3://bkt/p",
		"s3://bkt/p?endpoint=AKIA:secret@h:9":               "s3://bkt/p",
		"file:///var/backups#secret":                        "file:///var/backups",
		"s3://bkt/p%zz?x=secret":                            "<invalid URL>",
		"secret":                                            "<invalid URL>",
		"mailto:secret":                                     "mailto:",
	} {
		assert.Equal(t, want, destination.RedactURL(raw), raw)
	}
}
