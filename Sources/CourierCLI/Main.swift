import ArgumentParser
import Dispatch
import Foundation

/// The program's entry. The command is async, but the entry is not: an async `main` gives the
/// main thread to `dispatch_main`, and libdispatch's clean-up when that thread exits makes an
/// eventfd for the main queue. Out of descriptors (`ulimit -n`, or every slot taken by inherited
/// ones) that fails and libdispatch traps, so courier died with SIGILL rather than reporting the
/// EMFILE its connection had already turned into a URLError. Here the main thread only waits.
@main
enum CourierMain {
    /// Descriptors a transfer needs, checked before anything starts: libdispatch's epoll and
    /// eventfd, an epoll and an eventfd per event loop (one loop per CPU), the socket, the output
    /// and public-suffix files, and one for libdispatch's thread monitor, which opens
    /// `/proc/self/task/…/stat` now and then. libdispatch traps (SIGILL) when it cannot open its
    /// own, whatever the program does about EMFILE, so a run that would exhaust the table is
    /// refused at the start with a message instead.
    static var descriptorsNeeded: Int {
        2 + 2 * max(1, ProcessInfo.processInfo.activeProcessorCount) + 4
    }

    static func main() {
        if let free = freeDescriptors(upTo: descriptorsNeeded), free < descriptorsNeeded {
            let message = "courier: Too many open files: \(free) file descriptor(s) free, at least "
                + "\(descriptorsNeeded) needed to start (raise `ulimit -n` or close inherited descriptors)\n"
            FileHandle.standardError.write(Data(message.utf8))
            exit(EXIT_FAILURE)
        }
        let arguments: [String]
        do {
            arguments = try ConfigFile.expand(Array(CommandLine.arguments.dropFirst()))
        } catch let failure as ConfigFile.Failure {
            FileHandle.standardError.write(Data("courier: \(failure.message)\n".utf8))
            exit(26)
        } catch {
            exit(EXIT_FAILURE)
        }
        if let help = helpRequest(in: arguments) {
            switch help {
            case .manual:
                print(CourierCommand.helpMessage(columns: 100))
            case .topic(let topic):
                guard let text = HelpCatalog.text(for: topic) else {
                    FileHandle.standardError.write(Data("courier: no help category named \"\(topic ?? "")\"; try \"--help category\"\n".utf8))
                    exit(2)
                }
                print(text, terminator: "")
            }
            exit(EXIT_SUCCESS)
        }
        let commandArguments = arguments.map { $0 == "-V" ? "--version" : $0 }
        Task.detached {
            // Parses, runs, and exits with the command's status when it fails.
            await CourierCommand.main(commandArguments)
            exit(EXIT_SUCCESS)
        }
        // Woken by nothing: the task ends the process.
        DispatchSemaphore(value: 0).wait()
    }

    enum HelpRequest {
        case topic(String?)
        case manual
    }

    /// `-h`/`--help` with the category after it, if any, or `--manual`, wherever they are
    /// among the arguments (as curl finds them).
    static func helpRequest(in arguments: [String]) -> HelpRequest? {
        if arguments.contains("--manual") { return .manual }
        for (index, argument) in arguments.enumerated() {
            if argument.hasPrefix("--help=") { return .topic(String(argument.dropFirst("--help=".count))) }
            guard argument == "-h" || argument == "--help" else { continue }
            let next = index + 1 < arguments.count ? arguments[index + 1] : nil
            return .topic(next.flatMap { $0.hasPrefix("-") ? nil : $0 })
        }
        return nil
    }

    /// How many descriptors can still be opened, counted up to `limit`; nil when the probe
    /// fails for another reason than EMFILE.
    private static func freeDescriptors(upTo limit: Int) -> Int? {
        var opened: [Int32] = []
        defer { for fd in opened { close(fd) } }
        while opened.count < limit {
            let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return errno == EMFILE ? opened.count : nil }
            opened.append(fd)
        }
        return opened.count
    }
}
