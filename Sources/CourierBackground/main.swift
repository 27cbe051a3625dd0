// courier-background: carries one background session identifier's transfers, started by the
// sessions that use it (see URLSessionConfiguration.background(withIdentifier:)).
@_spi(CourierBackground) import Courier
import Foundation

exit(BackgroundDaemonMain.run(arguments: Array(CommandLine.arguments.dropFirst())))
