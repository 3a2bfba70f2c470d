//! `Store.serve_admin`: the admin endpoint (dashboard, `/metrics`, `postbox --admin`) served
//! from a Python application, over the same server the Rust API starts.

use postbox::Store;
#[cfg(feature = "admin")]
use postbox_admin::{AdminOptions, AdminServer};
use pyo3::prelude::*;

#[cfg(feature = "admin")]
use crate::errors::IntoPy;

/// The endpoint of a module built without the `admin` feature: there is none, so no
/// `AdminServer` object is ever made (the class stays, for annotations and the stubs).
#[cfg(not(feature = "admin"))]
enum AdminServer {}

#[cfg(not(feature = "admin"))]
impl AdminServer {
    fn url(&self) -> String {
        match *self {}
    }

    fn addr(&self) -> std::net::SocketAddr {
        match *self {}
    }

    fn token(&self) -> &str {
        match *self {}
    }

    fn stop(&self) {
        match *self {}
    }

    fn actions_allowed(&self) -> bool {
        match *self {}
    }
}

/// A running admin endpoint (from ``Store.serve_admin``). ``stop()`` it, or use it as a
/// context manager; the store stays open either way.
#[pyclass(frozen, module = "postbox._postbox", name = "AdminServer")]
pub struct PyAdminServer {
    server: AdminServer,
}

/// Starts the endpoint of `store` (called by `PyStore::serve_admin` with the GIL released).
#[cfg(feature = "admin")]
pub fn serve(
    py: Python<'_>,
    store: &Store,
    addr: &str,
    allow_actions: bool,
    token: Option<String>,
) -> PyResult<PyAdminServer> {
    let mut options = AdminOptions::read_only();
    options.allow_actions = allow_actions;
    options.token = token;
    let server = py
        .detach(|| postbox_admin::serve_admin(store, addr, options))
        .py_err()?;
    Ok(PyAdminServer { server })
}

/// Refuses: this module was built without the `admin` feature.
#[cfg(not(feature = "admin"))]
pub fn serve(
    _py: Python<'_>,
    _store: &Store,
    _addr: &str,
    _allow_actions: bool,
    _token: Option<String>,
) -> PyResult<PyAdminServer> {
    Err(crate::errors::not_built(
        "the admin endpoint (Store.serve_admin)",
        "admin",
    ))
}

#[pymethods]
impl PyAdminServer {
    /// The dashboard's URL, ``"http://127.0.0.1:PORT/"``.
    #[getter]
    fn url(&self) -> String {
        self.server.url()
    }

    /// The port it listens on (the real one when 0 was asked for).
    #[getter]
    fn port(&self) -> u16 {
        self.server.addr().port()
    }

    /// The token dead letters, ``postbox --admin`` commands and actions need (the one given,
    /// or a random one): the ``X-Postbox-Token`` header, ``postbox --admin URL --token``.
    #[getter]
    fn token(&self) -> String {
        self.server.token().to_owned()
    }

    /// Stops serving (no new connections). Calling it again does nothing.
    fn stop(&self, py: Python<'_>) {
        py.detach(|| self.server.stop());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) {
        self.stop(py);
    }

    fn __repr__(&self) -> String {
        format!(
            "AdminServer(url={:?}, actions={})",
            self.server.url(),
            if self.server.actions_allowed() {
                "True"
            } else {
                "False"
            }
        )
    }
}
