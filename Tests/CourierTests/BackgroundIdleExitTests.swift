@testable import Courier
import Testing

/// How long a background session's daemon stays once idle.
@Suite("Background daemon idle exit")
struct BackgroundIdleExitTests {
    @Test("COURIER_BACKGROUND_IDLE_EXIT gives the seconds; unset, unreadable or out of range gives 2")
    func idleExitSeconds() {
        #expect(BackgroundDaemon.idleExitSeconds([:]) == 2)
        #expect(BackgroundDaemon.idleExitSeconds(["COURIER_BACKGROUND_IDLE_EXIT": "0.2"]) == 0.2)
        #expect(BackgroundDaemon.idleExitSeconds(["COURIER_BACKGROUND_IDLE_EXIT": "30"]) == 30)
        for text in ["", "0", "-1", "soon", "3601", "inf", "nan"] {
            #expect(BackgroundDaemon.idleExitSeconds(["COURIER_BACKGROUND_IDLE_EXIT": text]) == 2, "\(text)")
        }
    }
}
