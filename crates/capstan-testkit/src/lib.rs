//! Test harness shared by Capstan's test suites: starts real components (etcd today; the API
//! server, containerd and test images as later issues add them) in temporary directories on
//! loopback ports, and tears them down when the test ends.
