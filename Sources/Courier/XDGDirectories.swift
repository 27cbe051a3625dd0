import Foundation

/// Where Courier's stores live, by the XDG base directory specification: persistent data
/// (credentials, cookies) under `$XDG_DATA_HOME/courier`, the cache under
/// `$XDG_CACHE_HOME/courier`. A relative path in either variable is invalid and ignored (the
/// specification's rule); without the variable, `~/.local/share` and `~/.cache`, from `HOME`,
/// or from the password database when there is none (a service).
enum XDGDirectories {
    /// `$XDG_DATA_HOME/courier/<name>`.
    static func data(_ name: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        courierFolder(variable: "XDG_DATA_HOME", fallback: ".local/share", environment: environment).appendingPathComponent(name, isDirectory: false)
    }

    /// `$XDG_CACHE_HOME/courier`.
    static func cache(environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        courierFolder(variable: "XDG_CACHE_HOME", fallback: ".cache", environment: environment)
    }

    private static func courierFolder(variable: String, fallback: String, environment: [String: String]) -> URL {
        let base: URL
        if let value = environment[variable], value.hasPrefix("/") {
            base = URL(fileURLWithPath: value, isDirectory: true)
        } else if let home = environment["HOME"], home.hasPrefix("/") {
            base = URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent(fallback, isDirectory: true)
        } else {
            base = FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(fallback, isDirectory: true)
        }
        return base.appendingPathComponent("courier", isDirectory: true)
    }
}
