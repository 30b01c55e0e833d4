//! A containerd of the agent's own: when no runtime endpoint is given, the agent writes a
//! containerd configuration under its data dir (own socket, root and state directories, the CRI
//! plugin on with the agent's CNI paths and sandbox image), starts `containerd` with it and
//! restarts it if it dies. Stopping the agent stops containerd but not the containers: their
//! shims live on, and the next containerd finds them again.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;
use tokio::sync::watch;

/// The longest Unix socket path the kernel accepts (`sun_path` less its terminating zero).
const MAX_SOCKET_PATH: usize = 107;

/// Failures to start containerd.
#[derive(Debug, thiserror::Error)]
pub enum ContainerdError {
    /// A program the runtime needs is not installed.
    #[error(
        "`{program}` was not found on PATH: install the Debian package `{package}` \
         (apt-get install containerd runc), or pass --container-runtime-endpoint"
    )]
    Missing {
        /// The program.
        program: &'static str,
        /// The package that ships it.
        package: &'static str,
    },
    /// The socket path is longer than a Unix socket path may be.
    #[error(
        "the containerd socket path {0} is too long for a Unix socket: use a shorter --data-dir"
    )]
    SocketPath(PathBuf),
    /// A file or directory could not be written.
    #[error("cannot write {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// containerd exited or never answered.
    #[error("containerd did not start: {reason} (its log: {log})")]
    NotReady {
        /// What happened.
        reason: String,
        /// containerd's log file.
        log: PathBuf,
    },
}

/// Where the agent's containerd keeps everything, under `<agent-dir>/containerd` (and the CNI
/// configuration under `<agent-dir>/etc/cni/net.d`).
#[derive(Debug, Clone)]
pub struct Layout {
    /// `<agent-dir>/containerd`.
    pub dir: PathBuf,
}

impl Layout {
    /// The layout under the agent directory `agent_dir`.
    pub fn new(agent_dir: &Path) -> Layout {
        Layout {
            dir: agent_dir.join("containerd"),
        }
    }
    /// The generated configuration.
    pub fn config(&self) -> PathBuf {
        self.dir.join("config.toml")
    }
    /// The gRPC socket (CRI and containerd's own API).
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }
    /// containerd's log.
    pub fn log(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }
    fn pid_file(&self) -> PathBuf {
        self.dir.join("containerd.pid")
    }
}

/// What the generated configuration points containerd's CRI plugin at.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// The sandbox (pause) image, imported by the agent.
    pub sandbox_image: String,
    /// Where the CNI plugin binaries are.
    pub cni_bin_dir: PathBuf,
    /// Where the agent writes the CNI network configuration.
    pub cni_conf_dir: PathBuf,
    /// Per-registry host configuration (`hosts.toml` files), for mirrors.
    pub registry_config_dir: PathBuf,
}

/// containerd's configuration (version 2, containerd 1.6 and 1.7) for `layout`.
pub fn config_toml(layout: &Layout, settings: &RuntimeSettings) -> String {
    let quote = |path: &Path| toml_string(&path.display().to_string());
    let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
    format!(
        "# Written by capstan at every start; edits are lost.\n\
         version = 2\n\
         root = {root}\n\
         state = {state}\n\
         \n\
         [grpc]\n\
         \x20 address = {socket}\n\
         \n\
         [plugins.\"io.containerd.internal.v1.opt\"]\n\
         \x20 path = {opt}\n\
         \n\
         [{cri}]\n\
         \x20 sandbox_image = {sandbox}\n\
         \x20 stream_server_address = \"127.0.0.1\"\n\
         \x20 stream_server_port = \"0\"\n\
         \x20 enable_selinux = false\n\
         \x20 enable_unprivileged_ports = true\n\
         \x20 enable_unprivileged_icmp = true\n\
         \x20 # Keep pods' OOM score adjustments at or above the agent's own: where root lacks\n\
         \x20 # CAP_SYS_RESOURCE (as in nested containers), lowering them fails every sandbox.\n\
         \x20 restrict_oom_score_adj = true\n\
         \n\
         [{cri}.containerd]\n\
         \x20 snapshotter = \"overlayfs\"\n\
         \x20 default_runtime_name = \"runc\"\n\
         \n\
         [{cri}.containerd.runtimes.runc]\n\
         \x20 runtime_type = \"io.containerd.runc.v2\"\n\
         \n\
         [{cri}.containerd.runtimes.runc.options]\n\
         \x20 SystemdCgroup = false\n\
         \n\
         [{cri}.cni]\n\
         \x20 bin_dir = {cni_bin}\n\
         \x20 conf_dir = {cni_conf}\n\
         \n\
         [{cri}.registry]\n\
         \x20 config_path = {registries}\n",
        root = quote(&layout.dir.join("root")),
        state = quote(&layout.dir.join("state")),
        socket = quote(&layout.socket()),
        opt = quote(&layout.dir.join("opt")),
        sandbox = toml_string(&settings.sandbox_image),
        cni_bin = quote(&settings.cni_bin_dir),
        cni_conf = quote(&settings.cni_conf_dir),
        registries = quote(&settings.registry_config_dir),
    )
}

/// A TOML basic string.
pub(crate) fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether `program` is an executable file on PATH.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            let file = dir.join(program);
            file.metadata().is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt as _;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
    })
}

/// A running containerd, supervised: restarted if it exits, stopped (SIGTERM) when this is
/// dropped.
#[derive(Debug)]
pub struct Containerd {
    socket: PathBuf,
    stop: watch::Sender<bool>,
    supervisor: Option<tokio::task::JoinHandle<()>>,
}

impl Containerd {
    /// Writes the configuration, stops a containerd a previous agent left running on the same
    /// directory, starts containerd and waits until its CRI service answers.
    pub async fn start(
        layout: &Layout,
        settings: &RuntimeSettings,
    ) -> Result<Containerd, ContainerdError> {
        for (program, package) in [
            ("containerd", "containerd"),
            ("containerd-shim-runc-v2", "containerd"),
            ("runc", "runc"),
        ] {
            if !on_path(program) {
                return Err(ContainerdError::Missing { program, package });
            }
        }
        let socket = layout.socket();
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(ContainerdError::SocketPath(socket));
        }
        for dir in [
            &layout.dir,
            &settings.cni_conf_dir,
            &settings.registry_config_dir,
        ] {
            std::fs::create_dir_all(dir).map_err(|source| ContainerdError::Io {
                path: dir.clone(),
                source,
            })?;
        }
        let config = layout.config();
        write(&config, config_toml(layout, settings).as_bytes())?;
        stop_stale(layout).await;
        let child = spawn(layout).await?;
        let (stop, stopped) = watch::channel(false);
        let mut runtime = Containerd {
            socket: socket.clone(),
            stop,
            supervisor: None,
        };
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        runtime.supervisor = Some(tokio::spawn(supervise(
            layout.clone(),
            child,
            stopped,
            ready_tx,
        )));
        let ready = wait_ready(&socket, ready_rx).await;
        ready.map_err(|reason| ContainerdError::NotReady {
            reason,
            log: layout.log(),
        })?;
        Ok(runtime)
    }

    /// The socket CRI clients connect to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Stops containerd (SIGTERM, then SIGKILL after 10 s) and waits for it.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(supervisor) = self.supervisor.take() {
            let _ = supervisor.await;
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // The supervisor sees the flag and stops containerd itself.
        let _ = self.stop.send(true);
    }
}

fn write(path: &Path, contents: &[u8]) -> Result<(), ContainerdError> {
    std::fs::write(path, contents).map_err(|source| ContainerdError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Starts containerd on `layout`'s configuration, logging to its log file.
async fn spawn(layout: &Layout) -> Result<tokio::process::Child, ContainerdError> {
    let log_path = layout.log();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|source| ContainerdError::Io {
            path: log_path.clone(),
            source,
        })?;
    let err = log.try_clone().map_err(|source| ContainerdError::Io {
        path: log_path.clone(),
        source,
    })?;
    let child = Command::new("containerd")
        .arg("--config")
        .arg(layout.config())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        // Its own process group: a Ctrl-C meant for the agent must not reach containerd first.
        .process_group(0)
        .spawn()
        .map_err(|source| ContainerdError::Io {
            path: PathBuf::from("containerd"),
            source,
        })?;
    if let Some(pid) = child.id() {
        write(&layout.pid_file(), pid.to_string().as_bytes())?;
    }
    Ok(child)
}

/// Stops the containerd a previous agent on this directory left running (after a crash): two
/// on one state directory would corrupt it.
async fn stop_stale(layout: &Layout) {
    let Some(pid) = std::fs::read_to_string(layout.pid_file())
        .ok()
        .and_then(|text| text.trim().parse::<i32>().ok())
    else {
        return;
    };
    let config = layout.config().display().to_string();
    let ours = std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
        cmdline
            .split(|b| *b == 0)
            .any(|arg| arg == config.as_bytes())
    });
    if !ours {
        return;
    }
    tracing::warn!(pid, "stopping the containerd a previous agent left running");
    signal(pid, rustix::process::Signal::TERM);
    for _ in 0..100 {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    signal(pid, rustix::process::Signal::KILL);
}

fn signal(pid: i32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Waits until containerd's CRI service answers, or containerd exits, for up to a minute.
async fn wait_ready(
    socket: &Path,
    mut exited: tokio::sync::oneshot::Receiver<String>,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(cri) = crate::runtime::cri::Cri::connect(socket).await
            && cri.version().await.is_ok()
        {
            return Ok(());
        }
        if let Ok(reason) = exited.try_recv() {
            return Err(reason);
        }
        if tokio::time::Instant::now() > deadline {
            return Err("its CRI service did not answer within a minute".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Keeps containerd running until `stop` turns true: a containerd that exits is started again
/// after a pause that doubles from 1 s to 30 s. The first exit is reported on `first_exit`
/// (while the agent still waits for containerd to come up).
async fn supervise(
    layout: Layout,
    mut child: tokio::process::Child,
    mut stop: watch::Receiver<bool>,
    first_exit: tokio::sync::oneshot::Sender<String>,
) {
    let mut first_exit = Some(first_exit);
    let mut backoff = Duration::from_secs(1);
    loop {
        let status = tokio::select! {
            status = child.wait() => status,
            _ = stopped(&mut stop) => {
                terminate(&mut child).await;
                let _ = std::fs::remove_file(layout.pid_file());
                return;
            }
        };
        let reason = match status {
            Ok(status) => format!("containerd exited ({status})"),
            Err(e) => format!("cannot wait for containerd: {e}"),
        };
        if let Some(report) = first_exit.take() {
            let _ = report.send(reason);
            return;
        }
        tracing::error!(%reason, log = %layout.log().display(), "containerd stopped; starting it again");
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stopped(&mut stop) => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
        match spawn(&layout).await {
            Ok(next) => child = next,
            Err(e) => tracing::error!(error = %e, "cannot start containerd again"),
        }
    }
}

/// Resolves once the stop flag is set (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// SIGTERM, then SIGKILL if containerd is still there after 10 s.
async fn terminate(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
        signal(pid, rustix::process::Signal::TERM);
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_ok()
        {
            return;
        }
    }
    let _ = child.kill().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_points_at_the_agent_directories() {
        let layout = Layout::new(Path::new("/var/lib/capstan/agent"));
        let settings = RuntimeSettings {
            sandbox_image: "capstan.internal/pause:1".to_owned(),
            cni_bin_dir: PathBuf::from("/usr/lib/cni"),
            cni_conf_dir: PathBuf::from("/var/lib/capstan/agent/etc/cni/net.d"),
            registry_config_dir: PathBuf::from("/var/lib/capstan/agent/etc/containerd/certs.d"),
        };
        let text = config_toml(&layout, &settings);
        for line in [
            "version = 2",
            "root = \"/var/lib/capstan/agent/containerd/root\"",
            "address = \"/var/lib/capstan/agent/containerd/containerd.sock\"",
            "sandbox_image = \"capstan.internal/pause:1\"",
            "bin_dir = \"/usr/lib/cni\"",
            "conf_dir = \"/var/lib/capstan/agent/etc/cni/net.d\"",
            "SystemdCgroup = false",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(toml_string("/plain/path"), "\"/plain/path\"");
    }
}
