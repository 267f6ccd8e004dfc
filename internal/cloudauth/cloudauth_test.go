package cloudauth

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
)

func TestRegistryHosts(t *testing.T) {
	tests := []struct {
		cloud *cloud
		host  string
		ok    bool
		want  registry
	}{
		{awsCloud, "123456789012.dkr.ecr.us-west-2.amazonaws.com", true, registry{host: "123456789012.dkr.ecr.us-west-2.amazonaws.com", region: "us-west-2"}},
		{awsCloud, "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn", true, registry{host: "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn", region: "cn-north-1"}},
		{awsCloud, "123456789012.dkr.ecr-fips.us-east-1.amazonaws.com", true, registry{host: "123456789012.dkr.ecr-fips.us-east-1.amazonaws.com", region: "us-east-1"}},
		{awsCloud, "public.ecr.aws", true, registry{host: "public.ecr.aws", region: "us-east-1", public: true}},
		{awsCloud, "12345.dkr.ecr.us-west-2.amazonaws.com", false, registry{}},
		{awsCloud, "123456789012.dkr.ecr.us-west-2.amazonaws.com.evil.example", false, registry{}},
		{awsCloud, "ghcr.io", false, registry{}},
		{azureCloud, "x.azurecr.io", true, registry{host: "x.azurecr.io", region: ".azurecr.io"}},
		{azureCloud, "x.azurecr.cn", true, registry{host: "x.azurecr.cn", region: ".azurecr.cn"}},
		{azureCloud, "x.azurecr.us", true, registry{host: "x.azurecr.us", region: ".azurecr.us"}},
		{azureCloud, "azurecr.io", false, registry{}},
		{azureCloud, "x.azurecr.io.example", false, registry{}},
		{gcpCloud, "gcr.io", true, registry{host: "gcr.io"}},
		{gcpCloud, "eu.gcr.io", true, registry{host: "eu.gcr.io"}},
		{gcpCloud, "europe-west1-docker.pkg.dev", true, registry{host: "europe-west1-docker.pkg.dev"}},
		{gcpCloud, "docker.pkg.dev.example", false, registry{}},
	}
	for _, tt := range tests {
		got, err := tt.cloud.registry(tt.host)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("%s %s: %+v, %v", tt.cloud.name, tt.host, got, err)
		}
	}
}

func TestParseFeatureGates(t *testing.T) {
	for _, tt := range []struct {
		in   string
		on   bool
		fail string
	}{
		{"", false, ""},
		{"ObjectLevelWorkloadIdentity=true", true, ""},
		{" ObjectLevelWorkloadIdentity = TRUE ,", true, ""},
		{"ObjectLevelWorkloadIdentity=false", false, ""},
		{"ObjectLevelWorkloadIdentity", false, "want Name=true"},
		{"ObjectLevelWorkloadIdentity=yes", false, "true or false"},
		{"CacheSecretsAndConfigMaps=true", false, "unknown feature gate"},
	} {
		on, err := ParseFeatureGates(tt.in)
		if on != tt.on || (tt.fail == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.fail)) {
			t.Errorf("%q: %v, %v", tt.in, on, err)
		}
	}
}

func TestCacheRenewsBeforeExpiryAndStaysBounded(t *testing.T) {
	c := newCache(3)
	now := time.Unix(1_700_000_000, 0)
	cred := authn.AuthConfig{Username: "u", Password: "p"}
	k := cacheKey{"aws", "controller", "r"}
	c.put(k, cred, now, now.Add(time.Hour))
	if _, ok := c.get(k, now.Add(54*time.Minute)); !ok {
		t.Error("fresh credentials missed")
	}
	if _, ok := c.get(k, now.Add(55*time.Minute)); ok {
		t.Error("credentials 5 minutes before expiry were served")
	}
	// A short-lived token is renewed a fifth of its lifetime early.
	short := cacheKey{"gcp", "controller", "r"}
	c.put(short, cred, now, now.Add(10*time.Minute))
	if _, ok := c.get(short, now.Add(8*time.Minute)); ok {
		t.Error("short-lived credentials served in their last fifth")
	}
	// Without an expiry nothing is cached.
	c.put(cacheKey{"azure", "controller", "r"}, cred, now, time.Time{})
	for i := range 10 {
		c.put(cacheKey{"aws", fmt.Sprint(i), "r"}, cred, now, now.Add(time.Duration(i+1)*time.Hour))
	}
	if n := c.len(); n != 3 {
		t.Errorf("cache holds %d entries, want 3", n)
	}
	if _, ok := c.get(cacheKey{"aws", "9", "r"}, now); !ok {
		t.Error("the latest entry was evicted")
	}
}

func TestAzureOtherCloud(t *testing.T) {
	for _, tt := range []struct {
		authority, host string
		other           bool
	}{
		{"https://login.microsoftonline.com/", "x.azurecr.io", false},
		{"https://login.chinacloudapi.cn", "x.azurecr.cn", false},
		{"https://127.0.0.1:8443/", "x.azurecr.cn", false},
		{"https://LOGIN.microsoftonline.com", "x.azurecr.cn", true},
		{"https://login.chinacloudapi.cn/", "x.azurecr.us", true},
		{"https://login.microsoftonline.us/", "x.azurecr.io", true},
	} {
		reg, err := azureCloud.registry(tt.host)
		if err != nil {
			t.Fatal(err)
		}
		got := azureOtherCloud(tt.authority, tt.host, acrClouds[reg.region])
		if (got != "") != tt.other {
			t.Errorf("%s for %s: %q", tt.authority, tt.host, got)
		}
	}
}
