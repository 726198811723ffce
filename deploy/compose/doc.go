// Package compose holds the checks of the top-level docker-compose.yml, Dockerfile and
// Grafana dashboard (deploy/grafana), which cannot run here: no Docker engine. It is its
// own module so that the compose-spec parser does not weigh on the gate's go.mod.
//
// The tests check that the compose file is valid by the compose specification, that
// every GATE_ variable it sets is one the gate knows (`gate env`), that the gate's
// subcommands and flags in it parse, that the files it mounts exist, that kafka-init
// creates every topic the gate and load services use, that the alerts select the job
// Prometheus scrapes, and that every metric the dashboard's queries name is one the gate
// exports.
package compose
