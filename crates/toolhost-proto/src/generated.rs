//! The code `build.rs` generates from `proto/`, one module per protobuf
//! package. Generated code names other packages by relative paths
//! (`super::super::super::kandev::plugin::v1`), so each package lives at
//! its own path under this module; the crate root re-exports the short
//! names the rest of toolhost uses (`plugin`, `plugin_v2`, `admin`).

#[doc(hidden)]
pub mod kandev {
    pub mod plugin {
        pub mod v1 {
            tonic::include_proto!("kandev.plugin.v1");
        }
    }
}
#[doc(hidden)]
pub mod toolhost {
    pub mod plugin {
        pub mod v2 {
            tonic::include_proto!("toolhost.plugin.v2");
        }
    }
    pub mod admin {
        // An event carries a whole plugin status; boxing it would change
        // the generated API for no gain on a rare, small stream.
        #[allow(clippy::large_enum_variant)]
        pub mod v1 {
            tonic::include_proto!("toolhost.admin.v1");
        }
    }
}
