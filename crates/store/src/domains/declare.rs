//! `domain!`: a storage domain declared once. From one list of methods it writes the domain's
//! trait, the marker trait of a layer that passes the domain through with that pass-through,
//! and a macro that hands the list to code implementing every method the same way (the
//! binary's `OpenedStore`, which matches each call to its backend). A new method is then
//! written in the declaration and in each backend, and nowhere else; the compiler lists the
//! backends (and a layer that implements the domain itself, like the server's metering).
//!
//! ```text
//! domain! {
//!     $ /// The trait's docs.
//!     pub trait ExecutionStore, pass PassExecutions, methods execution_store_methods {
//!         /// A method's docs.
//!         fn get_execution(&self, tenant: &Tenant, id: Id) -> Result<Option<Execution>>;
//!         sync {
//!             fn subscribe(&self, tenant: &Tenant, session_id: Id) -> Receiver;
//!         }
//!     }
//! }
//! ```
//!
//! Methods are async (`-> impl Future<Output = R> + Send` in the trait) unless listed in
//! `sync { ... }`. The leading `$` is passed in so that the generated macro can name its own
//! arguments. The generated `methods` macro, `execution_store_methods!(callback)`, expands to
//! `callback! { ExecutionStore; fn name(arg: Type, ...) -> R; ... sync { ... } }` (anything
//! after the callback's name is put after the domain's name).

/// Declares a domain: see the module's docs. Without `pass ...,` no pass-through is written
/// (the checkpoints, which a layer reaches through `Store::checkpoints`).
#[macro_export]
macro_rules! domain {
    (
        $d:tt
        $(#[$trait_meta:meta])*
        pub trait $Trait:ident, pass $Pass:ident, methods $methods:ident { $($body:tt)* }
    ) => {
        $crate::domain! { $d $(#[$trait_meta])* pub trait $Trait, methods $methods { $($body)* } }
        $crate::domain! { @pass $Trait, $Pass { $($body)* } }
    };
    (
        $d:tt
        $(#[$trait_meta:meta])*
        pub trait $Trait:ident, methods $methods:ident {
            $(
                $(#[$meta:meta])*
                fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty;
            )*
            $(sync {
                $(
                    $(#[$sync_meta:meta])*
                    fn $sync_name:ident(&self $(, $sync_arg:ident: $sync_ty:ty)* $(,)?) $(-> $sync_ret:ty)?;
                )*
            })?
        }
    ) => {
        $(#[$trait_meta])*
        pub trait $Trait: Send + Sync {
            $(
                $(#[$meta])*
                fn $name(&self $(, $arg: $ty)*) -> impl ::std::future::Future<Output = $ret> + Send;
            )*
            $($(
                $(#[$sync_meta])*
                fn $sync_name(&self $(, $sync_arg: $sync_ty)*) $(-> $sync_ret)?;
            )*)?
        }

        /// Hands the domain's methods to `callback!` (see `domain!`).
        #[doc(hidden)]
        #[macro_export]
        macro_rules! $methods {
            ($d callback:ident $d($d extra:tt)*) => {
                $d callback! {
                    $Trait $d($d extra)*;
                    $(fn $name($($arg: $ty),*) -> $ret;)*
                    $(sync { $(fn $sync_name($($sync_arg: $sync_ty),*) $(-> $sync_ret)?;)* })?
                }
            };
        }
    };
    (
        @pass $Trait:ident, $Pass:ident {
            $(
                $(#[$meta:meta])*
                fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty;
            )*
            $(sync {
                $(
                    $(#[$sync_meta:meta])*
                    fn $sync_name:ident(&self $(, $sync_arg:ident: $sync_ty:ty)* $(,)?) $(-> $sync_ret:ty)?;
                )*
            })?
        }
    ) => {
        /// Passes the whole domain through to the wrapped store (see [`crate::Layer`]).
        pub trait $Pass: $crate::Layer {}

        impl<L: $Pass> $Trait for L {
            $(
                fn $name(&self $(, $arg: $ty)*) -> impl ::std::future::Future<Output = $ret> + Send {
                    $crate::Layer::layer_inner(self).$name($($arg),*)
                }
            )*
            $($(
                fn $sync_name(&self $(, $sync_arg: $sync_ty)*) $(-> $sync_ret)? {
                    $crate::Layer::layer_inner(self).$sync_name($($sync_arg),*)
                }
            )*)?
        }
    };
}
