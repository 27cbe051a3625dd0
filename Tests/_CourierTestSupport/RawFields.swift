import CourierCore

/// Fields from raw name and value bytes, taken as they are (for values that are not UTF-8, or
/// not valid at all).
public func rawFields(_ pairs: [([UInt8], [UInt8])]) -> HTTPFields {
    var storage: [UInt8] = []
    var locations: [HTTPFields.Location] = []
    for (name, value) in pairs {
        let nameStart = storage.count
        storage += name
        let valueStart = storage.count
        storage += value
        locations.append(HTTPFields.Location(name: nameStart..<valueStart, value: valueStart..<storage.count))
    }
    return HTTPFields(validatedStorage: storage, locations: locations)
}
