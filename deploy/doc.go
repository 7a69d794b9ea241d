// Package deploy holds no code. It owns the checks of the deployment files
// next to it (the Dockerfile at the repository root, deploy/systemd,
// deploy/kubernetes, and the monitoring files deploy/prometheus and
// deploy/grafana, whose series must all exist): its tests parse them and assert what an operator relies
// on (probe paths, grace periods above the shutdown timeout, the state volume
// where --state points, non-root sandboxing) and load every example source
// file with the real config loader, with the environment the manifest gives it.
package deploy
