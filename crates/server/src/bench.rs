//! `stepwise bench http`: figures of the HTTP server (filled in below).
